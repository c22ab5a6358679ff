"""pip check: every installed distribution's requirements are installed, in versions they accept."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the names only: pytest loads conftest itself
    from .conftest import CheckFn

pytestmark = pytest.mark.section("pip")


def test_pip_check(check: CheckFn) -> None:
    check("pip.check")
