"""Kernel coverage: every target GPU (the matrix's gpu_archs: `--expect gpu_archs=`, the io.imagebuild.gpu-archs
label; and the archs of the GPUs the io.imagebuild.gpus label names) has SASS or JIT-able PTX in every CUDA library
of the image, read from the files by the probe's coverage section (no GPU needed); the result names the GPUs that
run natively and those that run only through PTX JIT."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("coverage")


@pytest.mark.asserts("coverage.kernels")
def test_kernel_coverage(check: Callable[..., dict[str, Any]], probe: dict[str, Any], smoke: Any,
                         figures: Callable[[dict[str, Any]], None], probe_lib: Any,
                         request: pytest.FixtureRequest) -> None:
    c = check()  # the probe's own verdict first: a CPU torch skips, unreadable GPU code or the visible GPU fails
    cov = probe.get("coverage") or {}
    libraries = cov.get("libraries") or {}
    want = smoke.expected_value("gpu_archs")
    targets = [probe_lib.normalize_arch(x) for x in str(want or "").replace(" ", ",").split(",") if x.strip()]
    # the matrix's named GPUs (io.imagebuild.gpus="h100=9.0,h200=9.0"): their archs are targets too
    named = [x.split("=", 1) for x in str(smoke.expected_value("gpus") or "").split(",") if "=" in x]
    targets = list(dict.fromkeys(targets + [probe_lib.normalize_arch(cc) for _, cc in named]))
    want = ",".join(targets)
    if not targets:
        pytest.skip(f"no target GPUs (no io.imagebuild.gpu-archs or io.imagebuild.gpus label, no --expect "
                    f"gpu_archs=): {c['reason']}")
    verdicts = probe_lib.judge_coverage(libraries, targets)
    figures({"targets": targets, "gpus": dict((n.strip(), probe_lib.normalize_arch(cc)) for n, cc in named),
             "summary": probe_lib.coverage_summary(verdicts),
             "native": [t for t, v in verdicts.items() if v["runs"] == "native"],
             "ptx_jit": {t: v["ptx_only"] for t, v in verdicts.items() if v["runs"] == "ptx-jit"},
             "sass": cov.get("sass"), "ptx": cov.get("ptx"), "libraries": len(libraries)})
    lost = probe_lib.coverage_failures(libraries, verdicts, {k: f"{k} ({v.get('owner', 'unowned')})"
                                                            for k, v in libraries.items()})
    if lost:
        pytest.fail(f"gpu_archs {want}: " + "; ".join(lost)[:3000], pytrace=False)
    request.node.user_properties.append(("note", f"{len(libraries)} CUDA libraries: the target GPUs run "
                                                 f"{probe_lib.coverage_summary(verdicts)}"))
