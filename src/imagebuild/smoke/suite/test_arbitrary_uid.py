"""The image runs as an arbitrary UID in group 0 (OpenShift): HOME and /tmp writable, torch imports (the uid rows of
probe/table.py, tested by test_checks.py). The runner starts a side container of the image with `--user 12345:0`
(--side arbitrary-uid=NAME); here: HOME's check proves something only when its probe really ran as that user."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("uid")


@pytest.mark.asserts("uid.home_writable")
def test_arbitrary_uid_home_writable(check: Callable[..., dict[str, Any]], smoke: Any) -> None:
    c = check()
    want = smoke.extra_probe("arbitrary-uid")["user"]
    fig = c.get("figures") or {}
    if want:
        uid, _, gid = want.partition(":")
        got = f"{fig.get('uid')}:{fig.get('gid')}"
        if got != f"{uid}:{gid or fig.get('gid')}":
            pytest.fail(f"the uid probe ran as {got}, not as {want}: the check proves nothing", pytrace=False)
