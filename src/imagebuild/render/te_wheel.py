"""The transformer_engine torch extension as a wheel, built once per build key and cached outside every image.

Compiling the extension takes 5-12 minutes on 2 cores. Its result depends only on the key below, so the builder
keeps the wheel in a cache folder named by the key and every runtime image with that key installs the same wheel
(`COPY te-wheels/`); no compiler, header or sdist reaches a runtime image. The key, not the wheel's bytes, is what
the runtime image's inputs hash sees (label io.imagebuild.te-build-key): a cached wheel and a fresh build of it are
the same input.

    key = sha256(TE version, torch version, CUDA, Python, C++ ABI, GPU archs, OS)
"""

from __future__ import annotations

import hashlib
import json

from imagebuild.compat import vtuple
from imagebuild.inputs import BuildInputs
from imagebuild.models import ResolvedVariant
from imagebuild.render.backend import backend_of
from imagebuild.render.image import (
    WHEELHOUSE_DIR,
    RenderedImage,
    _Common,
    _pip_index,
    _render,
    _tidy,
    _torch_requirements,
    _transformer_engine,
)

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
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def render_te_wheel(variant: ResolvedVariant, inputs: BuildInputs | None = None) -> RenderedImage | None:
    """The Dockerfile that compiles the TE wheel FROM the variant's base image; its last stage holds only the wheel
    (in /te-wheels), which the builder copies into the cache. None when the variant has no TE."""
    key = te_build_key(variant)
    if key is None:
        return None
    inputs = inputs or BuildInputs()
    common = _Common.of(variant, "runtime")
    te = _transformer_engine(common)
    assert te is not None
    # exactly the runtime pip stage's requirements: the two builds share that stage through the build cache
    torch_requirements = _torch_requirements(variant) + common.extra_pip
    build_args, secret_args, names, comment = _pip_index(variant, inputs, with_torch=True)
    ctx = {**common.context({}), "te": te, "te_key": key, "torch_requirements": torch_requirements,
           "abi": cxx_abi(variant.versions.torch), "pip_arg_names": names, "pip_index_comment": comment,
           "wheelhouse": inputs.wheelhouse is not None, "buildkit": backend_of(variant, inputs) == "buildkit"}
    dirs = {WHEELHOUSE_DIR: inputs.wheelhouse} if inputs.wheelhouse is not None else {}
    return RenderedImage(
        dockerfile=_tidy(_render("te-wheel.Dockerfile.j2", **ctx)),
        build_args=dict(sorted(build_args.items())),
        secret_build_args=dict(sorted(secret_args.items())),
        context_files={},
        context_dirs={k: v for k, v in dirs.items()},
        labels={KEY_LABEL: key},
    )
