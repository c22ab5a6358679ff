"""Nothing baked in that must not be: SSH host keys, files in /tmp, pip caches, apt caches (probe run as root)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("hygiene")


@pytest.mark.parametrize("what", ["ssh_host_keys", "tmp", "pip_cache", "apt_cache"])
def test_hygiene(extra_check: Callable[[str], dict[str, Any]], what: str) -> None:
    extra_check(f"hygiene.{what}")
