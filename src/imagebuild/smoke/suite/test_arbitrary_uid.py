"""The image runs as an arbitrary UID in group 0 (OpenShift): HOME and /tmp writable, torch imports. The runner
starts a second container of the image with `--user 12345:0` (--uid-host)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("uid")


@pytest.mark.parametrize("what", ["home_writable", "tmp_writable", "torch_import"])
def test_arbitrary_uid(extra_check: Callable[[str], dict[str, Any]], request: pytest.FixtureRequest, what: str) -> None:
    c = extra_check(f"uid.{what}")
    want = request.config.getoption("uid_user")
    fig = c.get("figures") or {}
    if want and what == "home_writable":
        uid, _, gid = want.partition(":")
        got = f"{fig.get('uid')}:{fig.get('gid')}"
        if got != f"{uid}:{gid or fig.get('gid')}":
            pytest.fail(f"the uid probe ran as {got}, not as {want}: the check proves nothing", pytrace=False)
