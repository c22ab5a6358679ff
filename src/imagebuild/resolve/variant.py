"""One RawVariant -> one ResolvedVariant: fill every pin, or report every reason it cannot be built."""

from __future__ import annotations

import dataclasses

from imagebuild.backends import AUTO
from imagebuild.compat import accel, cuda_tag
from imagebuild.matrix import RawVariant
from imagebuild.models import (
    DEFAULT_PLATFORM,
    FLAVORS,
    BaseSource,
    ResolvedVariant,
    Versions,
    platform_suffix,
)
from imagebuild.resolve import gpus as targets
from imagebuild.resolve.machine import platform_archs, platform_index, row_platforms, te_note
from imagebuild.resolve.origins import base_source, torch_index
from imagebuild.resolve.pins import companion, library_pins, pick_cuda, pick_torch
from imagebuild.resolve.platform import check_archs, check_glibc, pick_python, pick_te
from imagebuild.resolve.rules import Ctx


def variant_key(torch: str, cuda: str, python: str, os_id: str, platform: str = DEFAULT_PLATFORM) -> str:
    """`2.9.1-cuda12.8-py3.12-ubuntu24.04` / `2.13.0-cpu-py3.11-debian12` / `...-ubuntu24.04-arm64`: unique per
    image set, tag-safe; the default platform has no suffix (keys written before platforms existed stay)."""
    return f"{torch}-{accel(cuda)}-py{python}-{os_id}{platform_suffix(platform)}"


def resolve_row(ctx: Ctx, rv: RawVariant) -> list[ResolvedVariant]:
    """One variant per platform of the row: the default platform's as before, each other one with its own index,
    arch list and notes (an impossible platform is its own problem; the others still resolve)."""
    first = resolve_variant(ctx, rv)
    if first is None:
        return []
    out: list[ResolvedVariant] = []
    for platform in row_platforms(ctx, rv):
        if platform == ctx.tables.default_platform:
            out.append(first)
            continue
        before = len(ctx.problems)
        release = ctx.tables.torch[first.versions.torch]
        chosen = {k: v for k, v in first.chosen.items() if k != "torch_index_url"}
        ok, index_url = platform_index(ctx, rv, release, platform, first.torch_index_url, chosen)
        archs = platform_archs(ctx, rv, release, platform, first.arch_list)
        if not ok or archs is None or len(ctx.problems) > before:
            continue
        pairs = targets.for_platform(ctx, rv, release, platform, archs, chosen)
        if pairs is None:
            continue
        if first.versions.transformer_engine and (note := te_note(ctx, platform)):
            chosen[f"transformer_engine ({platform})"] = note
        out.append(dataclasses.replace(
            first, platform=platform, torch_index_url=index_url, arch_list=archs, chosen=chosen, gpus=pairs,
            gpu_archs=targets.target_archs(ctx.doc.gpu_archs, pairs, targets.named(ctx, rv)),
            key=variant_key(first.versions.torch, first.versions.cuda, first.versions.python, first.os.id, platform),
            base=_platform_base(ctx, rv, first, platform)))
    return out


def _platform_base(ctx: Ctx, rv: RawVariant, first: ResolvedVariant, platform: str) -> BaseSource:
    """A bootstrap of an architecture the OS's mirror does not serve reads its ports mirror (Ubuntu arm64:
    ports.ubuntu.com), unless the row names its own mirror."""
    info = ctx.tables.platforms.get(platform)
    base = first.base
    if base.kind == "bootstrap" and "mirror" not in rv.values and info and info.ports_mirror and first.os.ports_mirror:
        return dataclasses.replace(base, mirror=first.os.ports_mirror)
    return base


def resolve_variant(ctx: Ctx, rv: RawVariant) -> ResolvedVariant | None:
    before = len(ctx.problems)
    v = rv.values
    doc = ctx.doc
    chosen: dict[str, str] = {}
    release = pick_torch(ctx, rv, chosen)
    if release is None:
        return None
    picked = pick_cuda(ctx, rv, release)
    variant, info = picked if picked else (None, None)
    pins = library_pins(ctx, rv, release, variant, chosen)
    osinfo = ctx.tables.os[v["os"]]
    python = pick_python(ctx, rv, release, osinfo, chosen)
    check_glibc(ctx, rv, release, osinfo)
    ok_vision, torchvision = companion(ctx, rv, release, "torchvision", chosen)
    ok_audio, torchaudio = companion(ctx, rv, release, "torchaudio", chosen)
    if variant is None or pins is None:
        return None
    check_archs(ctx, rv, release, v["cuda"], variant.archs)
    pairs = targets.for_platform(ctx, rv, release, ctx.tables.default_platform, variant.archs, chosen) \
        if targets.check_row(ctx, rv, release, row_platforms(ctx, rv)) else None
    gpu_archs = targets.target_archs(doc.gpu_archs, pairs or (), targets.named(ctx, rv))
    ok_te, te, fp8_min_arch = pick_te(ctx, rv, release, info, pins["cudnn"], chosen, gpu_archs)
    base = base_source(ctx, rv, osinfo, chosen)
    index_url = torch_index(ctx, rv, release, chosen)
    if len(ctx.problems) > before or python is None or base is None or not (ok_vision and ok_audio and ok_te):
        return None
    if not variant.confirmed:
        chosen["pins"] = (f"torch {release.version} {cuda_tag(v['cuda'])} pins are best public knowledge "
                          f"(confirmed: false); `imagebuild refresh` re-reads them")
    versions = Versions(
        torch=release.version,
        cuda=v["cuda"],
        python=python,
        os=osinfo.id,
        cudnn=pins["cudnn"],
        nccl=pins["nccl"],
        triton=pins["triton"],
        torchvision=torchvision,
        torchaudio=torchaudio,
        transformer_engine=te,
    )
    return ResolvedVariant(
        key=variant_key(release.version, v["cuda"], python, osinfo.id),
        name=doc.name,
        registry=doc.registry,
        versions=versions,
        cuda_tag=cuda_tag(v["cuda"]),
        os=osinfo,
        base=base,
        torch_index_url=index_url,
        flavors=tuple(v.get("flavors") or FLAVORS),
        tf32=v.get("tf32", True),
        gpu_archs=gpu_archs,
        arch_list=variant.archs,
        min_driver=info.min_driver if info else None,
        fp8_min_arch=fp8_min_arch,
        apt_packages=dict(v.get("apt_packages") or {}),
        pip_packages=dict(v.get("pip_packages") or {}),
        ca_certs=tuple(str(p) for p in doc.ca_certs),  # the matrix's; render adds --ca-cert files (BuildInputs)
        size_budget=dict(doc.size_budget),
        layer_limit=doc.layer_limit,
        perf_min=dict(doc.perf_min),
        compression=dict(doc.compression),
        chosen=chosen,
        source=doc.location(rv.row),
        backend=v.get("backend", AUTO),
        gpus=pairs or (),
        vscode=v.get("vscode") or None,  # matrix/fields.py: a checked code-server release, or False
    )
