"""pip check: every installed distribution's requirements are installed, in versions they accept."""

import pytest

pytestmark = pytest.mark.section("pip")


def test_pip_check(check):
    check("pip.check")
