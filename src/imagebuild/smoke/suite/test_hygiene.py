"""Nothing baked in that must not be: SSH host keys, files in /tmp, pip caches, apt caches (probe run as root)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the names only: pytest loads conftest itself
    from .conftest import ExtraCheckFn

pytestmark = pytest.mark.section("hygiene")


@pytest.mark.parametrize("what", ["ssh_host_keys", "tmp", "pip_cache", "apt_cache"])
def test_hygiene(extra_check: ExtraCheckFn, what: str) -> None:
    extra_check(f"hygiene.{what}")
