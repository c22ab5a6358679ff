"""Performance probe (--perf, GPU): GEMM TFLOP/s and NCCL bus bandwidth against the matrix's perf_min."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("perf")


@pytest.mark.asserts("perf.{kind}")
@pytest.mark.parametrize("kind", ["gemm_fp32", "gemm_tf32", "gemm_bf16", "allreduce"])
def test_perf(check: Callable[..., dict[str, Any]], smoke: Any, kind: str) -> None:
    c = check()
    metric = c["figures"].get("metric")
    value = c["figures"].get("tflops", c["figures"].get("busbw_gbps"))
    floor = smoke.perf_min().get(metric)
    if floor is not None and value is not None and value < floor:
        pytest.fail(f"perf_min.{metric}: expected >= {floor:g}, found {value:g}", pytrace=False)
