"""Every shared library under site-packages resolves its dependencies (ldd, then a real load after its package's
imports for what ldd alone leaves open; the driver's libcuda/libnvidia-ml may be missing only when the container has
no GPU)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("ldd")


def test_ldd_resolves(check: Callable[..., dict[str, Any]]) -> None:
    check("ldd.resolve")
