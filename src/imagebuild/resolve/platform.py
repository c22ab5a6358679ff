"""Python/OS, GPU archs and transformer_engine: where a torch wheel meets the machine it has to run on."""

from __future__ import annotations

from imagebuild.compat import CudaInfo, TERelease, TorchRelease, arch_num, vtuple
from imagebuild.matrix import RawVariant
from imagebuild.models import OSInfo
from imagebuild.resolve.rules import Ctx, known_list, newest


def pick_python(ctx: Ctx, rv: RawVariant, release: TorchRelease, osinfo: OSInfo, chosen: dict[str, str]) -> str | None:
    """The variant's Python: in the torch release's range, and shipped or installable by the OS."""
    python = rv.values.get("python")
    where = "python"
    if python is None:
        python, where = osinfo.system_python, "os"
        chosen["python"] = f"{python} (the {osinfo.id} python3)"
    lo, hi = release.python
    in_range = release.pythons()
    if python not in in_range:
        ctx.bad(rv, where, f"torch {release.version} ships wheels for Python {lo}–{hi}, not {python}",
                "valid choices: " + ", ".join(in_range))
        return None
    if python == osinfo.system_python:
        return python
    if python in osinfo.installable_pythons:
        chosen.setdefault("python", f"{python} from deadsnakes ({osinfo.id} ships {osinfo.system_python})")
        return python
    offers = [p for p in (osinfo.system_python, *osinfo.installable_pythons) if p in in_range]
    others = [o.id for o in ctx.tables.os.values() if python in (o.system_python, *o.installable_pythons)]
    if osinfo.family == "debian":
        why = f"{osinfo.id} ships Python {osinfo.system_python} and cannot install another (Debian has no " \
              f"deadsnakes-style archive)"
    else:
        why = f"{osinfo.id} ships Python {osinfo.system_python} and deadsnakes offers " \
              f"{', '.join(osinfo.installable_pythons) or 'nothing'} there, not {python}"
    choices = f"valid choices on {osinfo.id}: {', '.join(offers) or 'none'}"
    if others:
        choices += f"; or an OS with Python {python}: {', '.join(others)}"
    ctx.bad(rv, where, why, choices)
    return None


def check_glibc(ctx: Ctx, rv: RawVariant, release: TorchRelease, osinfo: OSInfo) -> bool:
    if vtuple(osinfo.glibc) >= vtuple(release.glibc):
        return True
    ctx.bad(rv, "os", f"{osinfo.id} has glibc {osinfo.glibc}; torch {release.version} wheels need "
                      f"manylinux glibc >= {release.glibc}")
    return False


def runs_natively(arch: str, archs: tuple[str, ...]) -> bool:
    """CUDA binary compatibility: SASS for sm_XY runs on sm_XZ when Z >= Y (same major): sm_86 code runs on sm_89."""
    major, minor = divmod(arch_num(arch), 10)
    return any(divmod(arch_num(a), 10)[0] == major and divmod(arch_num(a), 10)[1] <= minor for a in archs)


def check_archs(ctx: Ctx, rv: RawVariant, release: TorchRelease, cuda: str, archs: tuple[str, ...]) -> bool:
    gpu_archs = ctx.doc.gpu_archs
    if not gpu_archs:
        return True
    if cuda == "cpu":
        ctx.bad(rv, "cuda", f"a CPU variant carries no GPU code, but gpu_archs asks for {', '.join(gpu_archs)}",
                "use a CUDA version here, or drop gpu_archs for a CPU-only matrix")
        return False
    ok = True
    for i, arch in enumerate(gpu_archs):
        if runs_natively(arch, archs):
            continue
        ok = False
        with_arch = [c for c, v in release.variants.items() if c != "cpu" and runs_natively(arch, v.archs)]
        ctx.bad(rv, ("gpu_archs", i),
                f"torch {release.version} cu{cuda.replace('.', '')} wheels carry no {arch} code "
                f"(they have {', '.join(archs)})",
                f"CUDA variants of torch {release.version} with {arch}: {', '.join(with_arch)}" if with_arch
                else f"no CUDA variant of torch {release.version} has {arch}")
    return ok


def pick_te(ctx: Ctx, rv: RawVariant, release: TorchRelease, info: CudaInfo | None, cudnn: str | None,
            chosen: dict[str, str], gpu_archs: tuple[str, ...] | None = None) -> tuple[bool, str | None, str | None]:
    """(ok, transformer_engine version, fp8_min_arch); `gpu_archs`: the archs the image targets (default: the
    matrix's gpu_archs)."""
    archs = ctx.doc.gpu_archs if gpu_archs is None else gpu_archs
    wanted = rv.values.get("transformer_engine")
    if wanted is None or wanted is False:
        return True, None, None
    if info is None:
        ctx.bad(rv, "transformer_engine", "transformer_engine needs CUDA; this is a CPU variant",
                "set transformer_engine: false for CPU variants")
        return False, None, None
    version = newest(ctx.tables.te, wanted)
    if version is None:
        ctx.bad(rv, "transformer_engine", f"unknown transformer_engine release {wanted}",
                known_list(ctx.tables.te, wanted, "transformer_engine"))
        return False, None, None
    te = ctx.tables.te[version]
    reasons = te_problems(te, release, info, cudnn, archs)
    if reasons:
        valid = [v for v, t in sorted(ctx.tables.te.items(), key=lambda kv: vtuple(kv[0]))
                 if not te_problems(t, release, info, cudnn, archs)]
        fit = (f"transformer_engine releases that fit torch {release.version} + CUDA {info.version}: "
               f"{', '.join(valid)}" if valid else "no known transformer_engine release fits this variant; "
               "set transformer_engine: false")
        for message in reasons:
            ctx.bad(rv, "transformer_engine", message, fit)
        return False, None, None
    note = f"{wanted} → {version} (newest known patch)" if version != wanted else version
    no_fp8 = [a for a in archs if arch_num(a) < arch_num(te.fp8_min_arch)]
    if no_fp8:
        note += f"; FP8 needs {te.fp8_min_arch}+, so {', '.join(no_fp8)} run it without FP8"
    if note != version:
        chosen["transformer_engine"] = note
    return True, version, te.fp8_min_arch


def te_problems(te: TERelease, release: TorchRelease, info: CudaInfo, cudnn: str | None,
                gpu_archs: tuple[str, ...] | list[str]) -> list[str]:
    """Why transformer_engine `te` does not work in a variant (empty: it does)."""
    label = f"transformer_engine {te.version}"
    out = []
    if te.broken:
        out.append(f"{label} cannot be used: {te.broken}")
    if vtuple(release.version) < vtuple(te.torch_min):
        out.append(f"{label} needs torch >= {te.torch_min}")
    if vtuple(info.version) < vtuple(te.cuda_min):
        out.append(f"{label} needs CUDA >= {te.cuda_min}, this variant is CUDA {info.version}")
    if info.major not in te.cuda_majors:
        out.append(f"{label} builds for CUDA {'/'.join(map(str, te.cuda_majors))}.x only, not CUDA {info.version}")
    if cudnn and vtuple(cudnn) < vtuple(te.cudnn_min):
        out.append(f"{label} needs cuDNN >= {te.cudnn_min}, torch {release.version} cu"
                   f"{info.version.replace('.', '')} pins cuDNN {cudnn}")
    if te.cudart_dirs and info.cudart_dir not in te.cudart_dirs:
        out.append(f"{label}'s loader looks for libcudart in nvidia/{{{','.join(te.cudart_dirs)}}}, but CUDA "
                   f"{info.version} wheels install it in nvidia/{info.cudart_dir} (import fails: 'cudart shared "
                   f"object not found')")
    low = [a for a in gpu_archs if arch_num(a) < arch_num(te.min_arch)]
    if low:
        out.append(f"{label} needs {te.min_arch}+, gpu_archs has {', '.join(low)}")
    return out
