"""Nothing baked in that must not be: SSH host keys, files in /tmp, pip caches, apt caches (probe run as root)."""

import pytest

pytestmark = pytest.mark.section("hygiene")


@pytest.mark.parametrize("what", ["ssh_host_keys", "tmp", "pip_cache", "apt_cache"])
def test_hygiene(extra_check, what):
    extra_check(f"hygiene.{what}")
