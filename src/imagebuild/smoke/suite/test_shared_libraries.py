"""Every shared library under site-packages resolves its dependencies (ldd, then a real load after its package's
imports for what ldd alone leaves open; the driver's libcuda/libnvidia-ml may be missing only when the container has
no GPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the names only: pytest loads conftest itself
    from .conftest import CheckFn

pytestmark = pytest.mark.section("ldd")


def test_ldd_resolves(check: CheckFn) -> None:
    check("ldd.resolve")
