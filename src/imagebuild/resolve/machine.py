"""Platforms: which torch wheels a CPU architecture has and where they come from, and the GPUs it carries.

The default platform's answers live in pins.py/origins.py (torch.yaml's `pypi_default` + `variants`); another
platform's are torch.yaml's per-platform line (`arm64:`): what PyPI's wheel for it is (torch 2.9.1's aarch64 wheel
is CPU-only, 2.13.0's pulls the nvidia-*-cu13 wheels) and which variants the PyTorch index serves for it. One matrix
row of several platforms becomes one variant per platform, each resolved on its own: the index can differ (torch
2.9.1 cu128 is PyPI's wheel on amd64 and the PyTorch index's on arm64).
"""

from __future__ import annotations

from imagebuild.compat import PlatformWheels, TorchRelease, arch_num, cuda_tag
from imagebuild.matrix import RawVariant
from imagebuild.resolve.rules import Ctx


def row_platforms(ctx: Ctx, rv: RawVariant) -> tuple[str, ...]:
    """The row's platforms in the written order (the default platform when the row names none)."""
    return tuple(rv.values.get("platforms") or (ctx.tables.default_platform,))


def _forced(ctx: Ctx, rv: RawVariant) -> tuple[str, str] | None:
    """The torch index the user named (value, where), the same precedence as origins.torch_index."""
    for value, source in ((ctx.inputs.torch_index_url, "--torch-index-url"),
                          (rv.values.get("torch_index_url"), "torch_index_url")):
        if value:
            return value, source
    return None


def _wheels(ctx: Ctx, rv: RawVariant, release: TorchRelease, platform: str) -> PlatformWheels | None:
    wheels = release.platform_wheels.get(platform)
    if wheels is None:
        having = [v for v, r in ctx.tables.torch.items() if platform in r.platform_wheels]
        ctx.bad(rv, "platforms", f"torch {release.version} has no known {platform} wheels (compat/data/torch.yaml "
                f"has no {platform.split('/')[1]} line for it)",
                f"torch releases with {platform} wheels: {', '.join(having) or 'none'}")
    return wheels


def platform_index(ctx: Ctx, rv: RawVariant, release: TorchRelease, platform: str, default_index: str | None,
                   chosen: dict[str, str]) -> tuple[bool, str | None]:
    """(ok, torch index URL or None = PyPI) for a platform other than the default. `default_index` is what
    origins.torch_index decided for the default platform (its override rules applied)."""
    wheels = _wheels(ctx, rv, release, platform)
    if wheels is None:
        return False, None
    cuda = rv.values["cuda"]
    arch = platform.split("/")[1]
    what = "CPU-only" if wheels.pypi == "cpu" else f"CUDA {wheels.pypi}"
    want = "the CPU build" if cuda == "cpu" else f"CUDA {cuda}"
    index_url = f"{ctx.tables.index_base}/{cuda_tag(cuda)}"
    forced = _forced(ctx, rv)
    if forced and forced[0].strip().lower() != "none":
        return True, default_index  # the user's own index (a mirror or a wheelhouse): trusted as on amd64
    if forced:  # PyPI alone
        if wheels.pypi == cuda:
            return True, None
        alternatives = [f"cuda: {wheels.pypi} (what PyPI's {arch} wheel is)"]
        if cuda in wheels.index:
            alternatives.append(f"drop {forced[1]} none to take {want} for {platform} from {index_url}")
        ctx.bad(rv, "platforms", f"torch {release.version}'s {platform} wheel on PyPI is {what}: {want} for "
                f"{platform} is not on PyPI ({forced[1]} none)",
                f"valid choices for {platform} from PyPI alone: " + "; or ".join(alternatives))
        return False, None
    if wheels.pypi == cuda and (default_index is None or cuda not in wheels.index):
        return True, None
    if cuda in wheels.index:
        if default_index is None:  # PyPI on the default platform, the PyTorch index here
            chosen[f"torch index ({platform})"] = (f"{index_url} (PyPI's {arch} wheel of torch {release.version} "
                                                    f"is {what})")
        return True, index_url
    offered = sorted({wheels.pypi, *wheels.index}, key=lambda c: (c == "cpu", c))
    ctx.bad(rv, "cuda", f"torch {release.version} has no {want} wheels for {platform} (PyPI's {arch} wheel is "
            f"{what}; the PyTorch index serves {', '.join(wheels.index) or 'nothing'} for {arch})",
            f"valid choices for {platform}: cuda: {', '.join(offered)}; or drop {platform} from platforms")
    return False, None


def platform_archs(ctx: Ctx, rv: RawVariant, release: TorchRelease, platform: str,
                   default_archs: tuple[str, ...]) -> tuple[str, ...] | None:
    """The GPU archs the platform's wheel carries (torch.yaml's per-platform `archs`, else the default platform's);
    None when gpu_archs asks for a GPU that never ships with that CPU architecture (arm64: from sm_90)."""
    info = ctx.tables.platforms.get(platform)
    wheels = release.platform_wheels.get(platform)
    archs = (wheels.archs.get(rv.values["cuda"]) if wheels else None) or default_archs
    floor = info.gpu_arch_min if info else None
    if not floor:
        return archs
    low = [(i, a) for i, a in enumerate(ctx.doc.gpu_archs) if arch_num(a) < arch_num(floor)]
    for i, arch in low:
        ctx.bad(rv, ("gpu_archs", i), f"{arch} GPUs do not come with {platform} hosts (they start at {floor}: "
                f"GH200 is sm_90, GB200 sm_100)", f"drop {platform} from platforms, or gpu_archs from {floor}")
    return None if low else archs


def te_note(ctx: Ctx, platform: str) -> str | None:
    """What the plan says about a compiled extension on a platform that is not compiled under emulation."""
    info = ctx.tables.platforms.get(platform)
    if info is None or not info.compile_native_only:
        return None
    return (f"transformer_engine's wheel compiles only on a native {platform} builder (`--builder NAME`, a buildx "
            f"builder with a {platform} node): under emulation the build refuses it")
