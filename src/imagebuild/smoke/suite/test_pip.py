"""pip check: every installed distribution's requirements are installed, in versions they accept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("pip")


def test_pip_check(check: Callable[..., dict[str, Any]]) -> None:
    check("pip.check")
