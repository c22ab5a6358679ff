"""The transformer_engine torch extension as a wheel, built once per build key and cached outside every image.

Compiling the extension takes 5-12 minutes on 2 cores. Its result depends only on its build key (te_key.py), so the
builder keeps the wheel in a cache folder named by the key and every runtime image with that key installs the same
wheel (`COPY te-wheels/`); no compiler, header or sdist reaches a runtime image. The key, not the wheel's bytes, is
what the runtime image's inputs hash sees (label io.imagebuild.te-build-key): a cached wheel and a fresh build of it
are the same input. The runtime parts it shares with the runtime image come from image.py (one direction only).
"""

from __future__ import annotations

from imagebuild.backends import backend_of, spec
from imagebuild.compat import arch_num
from imagebuild.compat import load as load_tables
from imagebuild.inputs import BuildInputs
from imagebuild.models import DEFAULT_PLATFORM, ResolvedVariant
from imagebuild.render.image import (
    WHEELHOUSE_DIR,
    Common,
    RenderedImage,
    pinned_torch_requirements,
    pip_index,
    render_template,
    tidy,
    transformer_engine_context,
)
from imagebuild.render.te_key import KEY_LABEL, cxx_abi, te_build_key


def te_cuda_archs(variant: ResolvedVariant) -> str | None:
    """NVTE_CUDA_ARCHS for a platform whose GPUs start above the oldest arch the wheel carries (arm64: from sm_90,
    GH200/GB200): the archs of the torch wheel from there on, "90;100;120". None: TE's own default (the default
    platform's Dockerfile stays as it was)."""
    info = load_tables().platforms.get(variant.platform)
    if variant.platform == DEFAULT_PLATFORM or info is None or not info.gpu_arch_min:
        return None
    floor = arch_num(info.gpu_arch_min)
    nums = sorted({arch_num(a) for a in variant.arch_list if arch_num(a) >= floor})
    return ";".join(str(n) for n in nums) or str(floor)


def render_te_wheel(variant: ResolvedVariant, inputs: BuildInputs | None = None) -> RenderedImage | None:
    """The Dockerfile that compiles the TE wheel FROM the variant's base image; its last stage holds only the wheel
    (in /te-wheels), which the builder copies into the cache. None when the variant has no TE."""
    key = te_build_key(variant)
    if key is None:
        return None
    inputs = inputs or BuildInputs()
    common = Common.of(variant, "runtime")
    te = transformer_engine_context(common)
    assert te is not None
    # exactly the runtime pip stage's requirements: the two builds share that stage through the build cache
    torch_requirements = pinned_torch_requirements(variant) + common.extra_pip
    build_args, secret_args, names, comment = pip_index(variant, inputs, with_torch=True)
    ctx = {**common.context({}), "te": te, "te_key": key, "torch_requirements": torch_requirements,
           "abi": cxx_abi(variant.versions.torch), "pip_arg_names": names, "pip_index_comment": comment,
           "wheelhouse": inputs.wheelhouse is not None, "features": spec(backend_of(variant, inputs)).features,
           "cuda_archs": te_cuda_archs(variant)}
    dirs = {WHEELHOUSE_DIR: inputs.wheelhouse} if inputs.wheelhouse is not None else {}
    return RenderedImage(
        dockerfile=tidy(render_template("te-wheel.Dockerfile.j2", **ctx)),
        build_args=dict(sorted(build_args.items())),
        secret_build_args=dict(sorted(secret_args.items())),
        context_files={},
        context_dirs={k: v for k, v in dirs.items()},
        labels={KEY_LABEL: key},
    )
