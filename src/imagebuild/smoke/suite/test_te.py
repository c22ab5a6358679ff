"""transformer_engine: imports for real, and is installed where the plan says it is (te.fp8, te.Linear fwd/bwd under
fp8_autocast on sm_89+: a row of probe/table.py, tested by test_checks.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("te")


@pytest.mark.asserts("te.import")
def test_te_import(probe: dict[str, Any], smoke: Any, check: Callable[..., dict[str, Any]]) -> None:
    want = smoke.expected_value("transformer_engine")
    installed = (probe.get("te") or {}).get("installed")
    if want and str(want).strip().lower() not in ("", "none") and not installed:
        pytest.fail(f"transformer_engine: expected {want}, found not installed", pytrace=False)
    check()
