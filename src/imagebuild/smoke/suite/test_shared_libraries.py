"""Every shared library under site-packages resolves its dependencies (ldd, then a real load after its package's
imports for what ldd alone leaves open; the driver's libcuda/libnvidia-ml may be missing only when the container has
no GPU)."""

import pytest

pytestmark = pytest.mark.section("ldd")


def test_ldd_resolves(check):
    check("ldd.resolve")
