"""transformer_engine: imports for real; te.Linear fwd/bwd under fp8_autocast on sm_89+."""

import pytest

pytestmark = pytest.mark.section("te")


def test_te_import(probe, smoke, check):
    want = smoke.expected_value("transformer_engine")
    installed = (probe.get("te") or {}).get("installed")
    if want and str(want).strip().lower() not in ("", "none") and not installed:
        pytest.fail(f"transformer_engine: expected {want}, found not installed", pytrace=False)
    check("te.import")


def test_te_fp8(check):
    check("te.fp8", gpu=True)
