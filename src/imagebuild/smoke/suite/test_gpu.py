"""GPU: each planned arch compiled into torch (the gpu rows of probe/table.py: visible devices, nvidia-smi -L with MIG,
device arch in the arch list, are tested by test_checks.py)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.section("gpu")


def test_gpu_archs_in_wheel(probe: dict[str, Any], smoke: Any, figures: Callable[[dict[str, Any]], None], probe_lib: ModuleType) -> None:
    """Each matrix gpu_arch is compiled into torch (compile-time list: needs no GPU)."""
    archs = probe["gpu"].get("arch_list") or []
    want = smoke.expected_value("gpu_archs")
    figures({"arch_list": archs, "expected": want})
    if smoke.cpu_variant() or not probe["versions"].get("cuda"):
        pytest.skip("CPU variant: torch carries no GPU archs")
    if not want:
        pytest.skip("no gpu_archs expectation (no io.imagebuild.gpu-archs label, no --expect gpu_archs=)")
    have = {probe_lib.normalize_arch(a) for a in archs}
    missing = [a for a in (probe_lib.normalize_arch(x) for x in want.replace(" ", ",").split(",") if x) if a not in have]
    if missing:
        pytest.fail(f"gpu_archs: expected {want}, torch arch list lacks {', '.join(missing)} (has {' '.join(archs)})",
                    pytrace=False)
