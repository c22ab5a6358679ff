"""The transformer_engine wheel's build key and the label that carries it.

Its own module because both sides need it: render/image.py labels every runtime image with the key of the TE wheel
it installs (part of its inputs hash), render/te_wheel.py renders the Dockerfile that builds that wheel. Neither
imports the other for it.

    key = sha256(TE version, torch version, CUDA, Python, C++ ABI, GPU archs, OS)
"""

from __future__ import annotations

import hashlib
import json

from imagebuild.compat import vtuple
from imagebuild.models import DEFAULT_PLATFORM, ResolvedVariant

KEY_FORMAT = "1"  # bump when the way the wheel is built changes (every cached wheel is rebuilt)
KEY_LABEL = "io.imagebuild.te-build-key"


def cxx_abi(torch_version: str) -> str:
    """The C++ ABI of PyPI/PyTorch-index torch wheels: the new (cxx11) ABI from 2.7 on (manylinux_2_28 builds)."""
    return "cxx11" if vtuple(torch_version) >= (2, 7) else "pre-cxx11"


def te_build_key(variant: ResolvedVariant) -> str | None:
    """The cache key of the variant's TE wheel; None when the variant has no transformer_engine."""
    v = variant.versions
    if not v.transformer_engine or v.cuda == "cpu":
        return None
    doc = {"format": KEY_FORMAT, "te": v.transformer_engine, "torch": v.torch, "cuda": v.cuda, "python": v.python,
           "abi": cxx_abi(v.torch), "archs": sorted(variant.gpu_archs), "os": variant.os.id}
    if variant.platform != DEFAULT_PLATFORM:  # another CPU architecture's wheel; amd64 keys stay as they were
        doc["platform"] = variant.platform
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
