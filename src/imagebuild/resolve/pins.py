"""torch release, CUDA variant, and the library pins that follow from the torch wheel.

The torch wheel is the authority: it pins nvidia-cudnn/nccl exactly, and torchvision/torchaudio each pin one torch.
An explicit cudnn/nccl pin must name the wheel's own pin (itself or a prefix of it): the wheel requires exactly that
version, so no other can be installed beside it (_check_pin).
"""

from __future__ import annotations

from imagebuild.compat import CudaInfo, TorchRelease, TorchVariant, vtuple
from imagebuild.matrix import RawVariant
from imagebuild.resolve.rules import Ctx, is_prefix, known_list, newest

LIB_NAMES = {"cudnn": "cuDNN", "nccl": "NCCL"}


def pick_torch(ctx: Ctx, rv: RawVariant, chosen: dict[str, str]) -> TorchRelease | None:
    spec = rv.values["torch"]
    version = newest(ctx.tables.torch, spec)
    if version is None:
        ctx.bad(rv, "torch", f"unknown torch release {spec}",
                known_list(ctx.tables.torch, spec, "torch")
                + f" (`imagebuild refresh --torch {spec} --write` adds a release from its wheel metadata)")
        return None
    if version != spec:
        chosen["torch"] = f"{spec} → {version} (newest known patch)"
    return ctx.tables.torch[version]


def pick_cuda(ctx: Ctx, rv: RawVariant, release: TorchRelease) -> tuple[TorchVariant, CudaInfo | None] | None:
    cuda = rv.values["cuda"]
    variant = release.variants.get(cuda)
    if variant is None:
        what = "CPU wheels" if cuda == "cpu" else f"CUDA {cuda} wheels"
        ctx.bad(rv, "cuda", f"torch {release.version} has no {what}",
                f"valid choices (the CUDA variants torch {release.version} ships): " + ", ".join(release.variants))
        return None
    info = ctx.tables.cuda.get(cuda)
    if cuda != "cpu" and info is None:  # data error: a torch variant without a cuda.yaml row
        ctx.bad(rv, "cuda", f"CUDA {cuda} is missing from the compatibility data (compat/data/cuda.yaml)")
        return None
    return variant, info


def _check_pin(ctx: Ctx, rv: RawVariant, lib: str, wanted: str, wheel_pin: str, label: str,
               chosen: dict[str, str]) -> str | None:
    """The wheel's own pin where `wanted` names it (itself or a prefix of it); else a problem and None. Another
    version, older or newer, is refused: the torch wheel requires exactly its own (`nvidia-nccl-cu13==2.29.7`), so pip
    installs no other beside it, and an image built anyway would carry the wheel's pin under a label naming `wanted`
    (its smoke test of the loaded NCCL against the label would then fail it)."""
    name, major = LIB_NAMES[lib], vtuple(wheel_pin)[0]
    valid = f"valid choices: {wheel_pin} (or a prefix of it), or leave {lib} unset"
    if vtuple(wanted)[0] != major:
        ctx.bad(rv, lib, f"{name} {wanted} is incompatible with {label}, whose wheel pins {name} {wheel_pin} "
                         f"(the major version must be {major})", valid)
        return None
    if is_prefix(wanted, wheel_pin):
        if wanted != wheel_pin:
            chosen[lib] = f"{wanted} → {wheel_pin} (the torch wheel's own pin)"
        return wheel_pin
    cuda = str(rv.values["cuda"])
    pinning = [r.version for r in ctx.tables.torch.values() if (v := r.variants.get(cuda)) is not None
               and getattr(v, lib) and is_prefix(wanted, getattr(v, lib))]
    where = f"; torch releases whose CUDA {cuda} wheel pins {name} {wanted}: {', '.join(pinning)}" if pinning else ""
    ctx.bad(rv, lib, f"{name} {wanted} is not the {name} {label}'s wheel pins: it requires exactly {wheel_pin}, and "
                     f"pip installs no other {name} beside it", valid + where)
    return None


def library_pins(ctx: Ctx, rv: RawVariant, release: TorchRelease, variant: TorchVariant | None,
                 chosen: dict[str, str]) -> dict[str, str | None] | None:
    """cudnn/nccl/triton of the variant; None when an explicit pin is rejected. `variant` None = the CUDA choice
    was already rejected: still judge explicit pins against every variant of the release, to report them too."""
    out: dict[str, str | None] = {}
    ok = True
    cuda = rv.values["cuda"]
    for lib in ("cudnn", "nccl"):
        wanted = rv.values.get(lib)
        if cuda == "cpu":
            if wanted is not None:
                ctx.bad(rv, lib, f"a CPU variant has no {LIB_NAMES[lib]}", f"remove {lib} from CPU variants")
                ok = False
            out[lib] = None
            continue
        if variant is None:
            pins = sorted({getattr(v, lib) for v in release.variants.values() if getattr(v, lib)}, key=vtuple)
            majors = sorted({vtuple(p)[0] for p in pins})
            if wanted is not None and pins and vtuple(wanted)[0] not in majors:
                ctx.bad(rv, lib, f"{LIB_NAMES[lib]} {wanted} is incompatible with torch {release.version}, whose "
                                 f"wheels pin {LIB_NAMES[lib]} {' / '.join(pins)}",
                        f"valid choices: a {LIB_NAMES[lib]} {'/'.join(map(str, majors))}.x version, "
                        f"or leave {lib} unset")
            ok = False
            continue
        wheel_pin = getattr(variant, lib)
        label = f"torch {release.version} {'cu' + cuda.replace('.', '')}"
        if wanted is None or wheel_pin is None:
            out[lib] = wanted or wheel_pin
            continue
        pin = _check_pin(ctx, rv, lib, wanted, wheel_pin, label, chosen)
        ok = ok and pin is not None
        out[lib] = pin
    out["triton"] = variant.triton if variant else None
    return out if ok else None


def companion(ctx: Ctx, rv: RawVariant, release: TorchRelease, lib: str, chosen: dict[str, str]) -> tuple[bool, str | None]:
    """torchvision / torchaudio: (ok, version or None). Each release of them pins exactly one torch."""
    wanted = rv.values.get(lib)
    known = getattr(release, lib)
    if wanted is False:
        return True, None
    if wanted is None:
        if known is None:
            chosen[lib] = f"none (no {lib} release matches torch {release.version})"
        return True, known
    if known is None:
        ctx.bad(rv, lib, f"no {lib} release matches torch {release.version}",
                f"set {lib}: false (torchaudio is frozen at 2.11)" if lib == "torchaudio" else f"set {lib}: false")
        return False, None
    if is_prefix(wanted, known):
        if wanted != known:
            chosen[lib] = f"{wanted} → {known} (the release built for torch {release.version})"
        return True, known
    ctx.bad(rv, lib, f"{lib} {wanted} does not match torch {release.version} (each {lib} release pins one torch "
                     f"version)", f"valid choices: {known} (or false)")
    return False, None
