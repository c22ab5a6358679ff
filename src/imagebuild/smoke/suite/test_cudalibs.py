"""One NCCL, the right one: the probe's cudalibs rows (one loadable libnccl; its ncclGetVersion = torch's build =
torch's pin = the nvidia-nccl wheel; one CUDA major for the nvidia-* wheels, cuDNN and cuBLAS), and the matrix pin:
the loadable libnccl's own version against `--expect nccl=` / the io.imagebuild.nccl label."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("cudalibs")


@pytest.mark.asserts("cudalibs.nccl_version")
def test_nccl_version_is_the_pinned_one(check: Callable[..., dict[str, Any]], smoke: Any,
                                        figures: Callable[[dict[str, Any]], None], probe_lib: Any) -> None:
    c = check()
    library = (c.get("figures") or {}).get("library")
    exps = [(src, v) for src, v in smoke.expected("nccl") if str(v).strip()]
    figures({"library": library, "expected": dict(exps)})
    bad = [f"libnccl is {library}, the matrix pins NCCL {v} ({src})" for src, v in exps
           if not probe_lib.same_nccl_version(library, v)]
    if bad:
        pytest.fail("; ".join(bad), pytrace=False)
