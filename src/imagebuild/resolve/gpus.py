"""Target GPUs (`gpus:`): which GPUs each image is for, and whether its CUDA and torch wheels can run on them.

A variant's own `gpus` replaces the matrix-level one; with neither (and no `gpu_archs`), its image family's default
from compat/data/gpus.yaml applies, kept to the GPUs that variant runs on (a default never makes an error). A GPU named
explicitly is refused, one problem each at the line it is written, when
- it comes with hosts of a CPU architecture the row does not build (gh200 is linux/arm64),
- the image's CUDA does not compile for its arch (sm_120 needs CUDA >= 12.8; CUDA 13 drops sm_50-sm_72),
- the torch wheel carries no code that runs on it (runs_natively: same major, minor <= the GPU's).
Each image gets the GPUs of its own platform (an arm64 image GH200, its amd64 twin H100); raw archs (`sm_90`) apply
to every platform.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagebuild.compat import TorchRelease
from imagebuild.compat.gpus import ARCH_RE, DATA_FILE, GpuTables, cc_of
from imagebuild.compat.gpus import load as load_gpus
from imagebuild.matrix import RawVariant
from imagebuild.matrix.yamlload import YPath
from imagebuild.resolve.platform import runs_natively
from imagebuild.resolve.rules import Ctx


@dataclass(frozen=True)
class Target:
    name: str  # "h100", or an arch "sm_90a" written as such
    arch: str  # "sm_90"
    platform: str | None  # None: a raw arch (every platform)
    path: YPath  # where it is written
    confirmed: bool = True

    @property
    def pair(self) -> tuple[str, str]:
        """(name, compute capability): what the image's label lists."""
        return self.name, cc_of(self.arch)


def _targets(ctx: Ctx, rv: RawVariant, data: GpuTables) -> list[Target] | None:
    """The row's named targets (its own `gpus`, else the matrix's), None when neither names any."""
    if "gpus" in rv.values:
        names, base = rv.values["gpus"], rv.origins.get("gpus", rv.row)
    elif ctx.doc.gpus:
        names, base = ctx.doc.gpus, ("gpus",)
    else:
        return None
    out = []
    for i, name in enumerate(names):
        gpu = data.gpus.get(name)
        if gpu is not None:
            out.append(Target(name, gpu.arch, gpu.platform, (*base, i), gpu.confirmed))
        elif ARCH_RE.match(name):
            out.append(Target(name, name, None, (*base, i)))
    return out


def check_row(ctx: Ctx, rv: RawVariant, release: TorchRelease, platforms: tuple[str, ...]) -> bool:
    """The checks that do not depend on a platform's wheel: a CPU row, the host platform, the CUDA toolkit range."""
    data = load_gpus()
    targets = _targets(ctx, rv, data)
    if not targets:
        return True
    cuda = rv.values["cuda"]
    if cuda == "cpu":
        names = ", ".join(t.name for t in targets)
        where = rv.origins.get("gpus") if "gpus" in rv.values else ("gpus",)
        ctx.bad(rv, where or "cuda", f"a CPU variant carries no GPU code, but gpus names {names}",
                "use a CUDA version here, or give this row `gpus: []`")
        return False
    ok = True
    for t in targets:
        if t.platform is not None and t.platform not in platforms:
            ok = False
            same = [g.name for g in data.gpus.values() if g.platform in platforms and g.arch == t.arch]
            ctx.bad(rv, t.path, f"{t.name} comes with {t.platform} hosts; this row builds {', '.join(platforms)} "
                    "only", f"add {t.platform} to platforms" + (f", or name {', '.join(same)}" if same else ""))
            continue
        span = data.arch_range(t.arch)
        if span is not None and not span.allows(cuda):
            ok = False
            fits = [c for c in release.variants if c != "cpu" and span.allows(c)]
            what = t.name if t.name == t.arch else f"{t.name} ({t.arch})"
            ctx.bad(rv, t.path, f"{what} needs {span.describe()}; this variant is CUDA {cuda} ({DATA_FILE})",
                    f"CUDA variants of torch {release.version} that target {t.arch}: {', '.join(fits)}" if fits
                    else f"no CUDA variant of torch {release.version} targets {t.arch}; drop {t.name} from gpus")
    return ok


def for_platform(ctx: Ctx, rv: RawVariant, release: TorchRelease, platform: str, wheel_archs: tuple[str, ...],
                 chosen: dict[str, str]) -> tuple[tuple[str, str], ...] | None:
    """The (name, compute capability) pairs the platform's image targets; None when a named GPU has no code in the
    torch wheel (reported). Run after check_row passed."""
    data = load_gpus()
    cuda = rv.values["cuda"]
    targets = _targets(ctx, rv, data)
    if targets is None:
        return () if ctx.doc.gpu_archs else _defaults(data, cuda, platform, wheel_archs, chosen)
    mine = [t for t in targets if t.platform in (None, platform)]
    ok = True
    for t in mine:
        if runs_natively(t.arch, wheel_archs):
            continue
        ok = False
        with_arch = [c for c, v in release.variants.items() if c != "cpu" and runs_natively(t.arch, v.archs)]
        what = t.name if t.name == t.arch else f"{t.name} ({t.arch})"
        ctx.bad(rv, t.path, f"torch {release.version} cu{cuda.replace('.', '')} wheels for {platform} carry no code "
                f"for {what} (they have {', '.join(wheel_archs)})",
                f"CUDA variants of torch {release.version} with {t.arch}: {', '.join(with_arch)}" if with_arch
                else f"no CUDA variant of torch {release.version} has {t.arch}")
    unconfirmed = [t.name for t in mine if not t.confirmed]
    if unconfirmed:
        chosen["gpus"] = (f"compute capability of {', '.join(unconfirmed)} is best public knowledge (confirmed: "
                          f"false in {DATA_FILE})")
    return tuple(t.pair for t in mine) if ok else None


def _defaults(data: GpuTables, cuda: str, platform: str, wheel_archs: tuple[str, ...],
              chosen: dict[str, str]) -> tuple[tuple[str, str], ...]:
    family = data.family(cuda, platform)
    if family is None:
        return ()
    picked = []
    for name in family.gpus:
        gpu = data.gpus.get(name)
        span = data.arch_range(gpu.arch) if gpu else None
        if gpu and span and span.allows(cuda) and runs_natively(gpu.arch, wheel_archs):
            picked.append((gpu.name, gpu.cc))
    if picked:
        chosen["gpus"] = (f"{', '.join(n for n, _ in picked)} (the default of {family.family} images, "
                          f"{DATA_FILE}; set gpus: to choose)")
    return tuple(picked)


def target_archs(gpu_archs: tuple[str, ...], pairs: tuple[tuple[str, str], ...], named: bool) -> tuple[str, ...]:
    """The archs an image must run natively on: the matrix's `gpu_archs` and the archs of GPUs the matrix named (a
    family default only labels the image: it adds none)."""
    if not named:
        return gpu_archs
    out = list(gpu_archs)
    for _, cc in pairs:
        major, _, minor = cc.partition(".")
        arch = f"sm_{major}{minor}"
        if arch not in out:
            out.append(arch)
    return tuple(out)


def named(ctx: Ctx, rv: RawVariant) -> bool:
    """The row's targets come from a `gpus:` the matrix wrote (not a family default)."""
    return "gpus" in rv.values or bool(ctx.doc.gpus)
