"""versions: python, torch, CUDA, cuDNN, NCCL, torchvision/torchaudio, triton, TE, installed dists; and
versions_match, the rule the suite compares expectations with."""

from __future__ import annotations

import re
from typing import Any

from probe.common import Probe


def format_cudnn_version(v) -> str | None:
    """torch.backends.cudnn.version(): 91002 -> "9.10.2" (cuDNN 9 scheme), 8907 -> "8.9.7"."""
    if v is None:
        return None
    v = int(v)
    if v >= 90000:
        return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    return f"{v // 1000}.{(v % 1000) // 100}.{v % 100}"


def _split_version(v: str) -> list[str]:
    return [p for p in re.split(r"[.]", v) if p != ""]


ABSENT = ("", "none", "null", "-", "n/a")
TRUE = ("1", "true", "yes", "on")


def versions_match(key: str, expected, found) -> bool:
    """Does the found value satisfy the expectation?

    Versions match when the shorter dotted form is a prefix of the longer (`3.11` ~ `3.11.2`, `9.10.2.21` ~ `9.10.2`);
    a local part (`+cu128`) is compared only when the expectation has one; `cuda=cpu` means torch has no CUDA;
    an empty/`none` expectation means "absent".
    """
    exp = "" if expected is None else str(expected).strip()
    key = key.replace("-", "_")
    if key == "tf32":
        return (exp.lower() in TRUE) == bool(found)
    if key == "cuda" and exp.lower() == "cpu":
        return found in (None, "", "cpu")
    if exp.lower() in ABSENT:
        return found in (None, "")
    if found in (None, ""):
        return False
    f = str(found).strip()
    if key == "os":
        return exp.lower().replace("-", "") == f.lower().replace("-", "")
    if "+" in exp:
        return exp == f
    fe, ff = _split_version(exp.split("+")[0]), _split_version(f.split("+")[0])
    n = min(len(fe), len(ff))
    return n > 0 and fe[:n] == ff[:n]


def _field(dist: Any, key: str) -> str | None:
    """A metadata field of an importlib.metadata distribution (None when absent)."""
    return dist.metadata.get(key)


def run(p: Probe):
    import platform

    v: dict[str, Any] = {"python": platform.python_version(), "torch": None, "cuda": None, "cudnn": None, "nccl": None,
         "torchvision": None, "torchaudio": None, "transformer_engine": None, "triton": None,
         "import_errors": {}}
    dists: dict[str, str] = {}
    try:
        from importlib import metadata

        for dist in metadata.distributions():
            name = (_field(dist, "Name") or "").lower().replace("_", "-")
            if name.startswith("nvidia-") or name in ("torch", "torchvision", "torchaudio", "triton",
                                                      "pytorch-triton", "transformer-engine",
                                                      "transformer-engine-torch", "transformer-engine-cu12",
                                                      "transformer-engine-cu13", "numpy", "jupyterlab",
                                                      "ninja"):
                dists[name] = dist.version
    except Exception as exc:
        v["import_errors"]["importlib.metadata"] = str(exc)
    v["dists"] = dict(sorted(dists.items()))
    torch = p.import_torch()
    if torch is None:
        if p.torch_error and "No module named 'torch'" not in p.torch_error:
            v["import_errors"]["torch"] = p.torch_error
    else:
        v["torch"] = torch.__version__
        v["cuda"] = torch.version.cuda
        v["torch_git"] = getattr(torch.version, "git_version", None)
        try:
            v["cudnn"] = format_cudnn_version(torch.backends.cudnn.version())
        except Exception as exc:
            v["import_errors"]["cudnn"] = str(exc)
        try:
            if torch.version.cuda and hasattr(torch.cuda, "nccl"):
                nv = torch.cuda.nccl.version()
                v["nccl"] = ".".join(str(x) for x in nv) if isinstance(nv, tuple) else str(nv)
        except Exception as exc:
            v["import_errors"]["nccl"] = str(exc)
        for mod in ("torchvision", "torchaudio"):
            try:
                m = __import__(mod)
                v[mod] = m.__version__
            except ImportError as exc:
                if f"No module named '{mod}'" not in str(exc):
                    v["import_errors"][mod] = f"{type(exc).__name__}: {exc}"
            except Exception as exc:
                v["import_errors"][mod] = f"{type(exc).__name__}: {exc}"
    for name in ("triton", "pytorch-triton"):
        if name in dists:
            v["triton"] = dists[name]
            break
    for name in ("transformer-engine", "transformer-engine-torch"):
        if name in dists:
            v["transformer_engine"] = dists[name]
            break
    p.doc["versions"] = v
