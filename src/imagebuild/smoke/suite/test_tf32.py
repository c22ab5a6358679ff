"""TF32: the image's policy holds in a fresh process; on a GPU it is within TF32 error and agrees with the policy
(the speed-up: probe/table.py's tf32 rows, tested by test_checks.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("tf32")


def test_tf32_policy(probe: dict[str, Any], smoke: Any, figures: Callable[[dict[str, Any]], None]) -> None:
    st = probe.get("tf32_at_import") or {}
    if not st:
        pytest.skip("torch not importable")
    figures({**st, "hook": probe.get("tf32", {}).get("hook"), "env_override": probe.get("tf32", {}).get("env_override")})
    want = smoke.expected_value("tf32")
    found = st.get("matmul_tf32")
    shown = (f"matmul tf32 {'on' if found else 'off'} (allow_tf32={st.get('matmul_allow_tf32')}, "
             f"fp32_precision={st.get('matmul_fp32_precision')}, "
             f"float32_matmul_precision={st.get('float32_matmul_precision')})")
    if want is None:
        pytest.skip(f"no tf32 expectation; found {shown}")
    if (str(want).lower() in ("1", "true", "yes", "on")) != bool(found):
        pytest.fail(f"tf32: expected {want}, found {shown}", pytrace=False)


@pytest.mark.asserts("tf32.accuracy")
def test_tf32_accuracy(check: Callable[..., dict[str, Any]], smoke: Any) -> None:
    c = check()
    want = smoke.expected_value("tf32")
    if want and str(want).lower() in ("1", "true", "yes", "on") and not c["figures"].get("default_is_tf32"):
        pytest.fail("tf32: policy says on, but a default fp32 matmul computes in IEEE fp32 "
                    f"(rel. error {c['figures'].get('rel_err_default'):.1e})", pytrace=False)
