"""Where things come from: the base flavor's FROM (registry image or bootstrapped rootfs) and the torch index."""

from __future__ import annotations

import re

from imagebuild.compat import TorchRelease, cuda_tag
from imagebuild.matrix import RawVariant
from imagebuild.models import BaseSource, OSInfo
from imagebuild.oci import Reference
from imagebuild.resolve.rules import Ctx

# nvidia/cuda tags: X.Y.Z-{base|runtime|devel}-<os> and X.Y.Z-cudnn[N]-{runtime|devel}-<os>
_NVIDIA_CUDA_TAG = re.compile(r"^(\d+\.\d+)(?:\.\d+)?-(?:(cudnn\d*)-)?(base|runtime|devel)-(.+)$")
_BOOTSTRAP_ONLY = ("mirror", "snapshot", "bootstrap_packages")


def _os_of_official(path: str, tag: str | None) -> str | None:
    """`ubuntu:24.04` -> ubuntu24.04, `debian:12-slim` / `debian:bookworm` -> debian12 (None when unknown)."""
    family = path.removeprefix("library/")
    if family not in ("ubuntu", "debian") or not tag:
        return None
    return family + tag.split("-")[0]


def _check_registry_base(ctx: Ctx, rv: RawVariant, ref_text: str, osinfo: OSInfo) -> bool:
    ref = Reference.parse(ref_text)
    path = ref.path
    if path == "nvidia/cuda" and ref.tag and (m := _NVIDIA_CUDA_TAG.match(ref.tag)):
        cuda_ver, cudnn, kind, tag_os = m.groups()
        if cudnn or kind != "base":
            ctx.bad(rv, "base_image",
                    f"{ref_text} ships CUDA libraries that torch's nvidia-* wheels install again (two copies of each "
                    f"library, ~2.3 GB)", "use an nvidia/cuda *-base-* tag (cudart only), the plain OS image, or "
                                          "bootstrap")
            return False
        if rv.values["cuda"] != "cpu" and cuda_ver != rv.values["cuda"]:
            ctx.bad(rv, "base_image", f"{ref_text} is CUDA {cuda_ver}, the variant is CUDA {rv.values['cuda']}",
                    f"use an nvidia/cuda:{rv.values['cuda']}.*-base-{osinfo.id} tag")
            return False
        if tag_os != osinfo.id:
            ctx.bad(rv, "base_image", f"{ref_text} is {tag_os}, the variant's os is {osinfo.id}",
                    f"use an nvidia/cuda *-base-{osinfo.id} tag or set os: {tag_os}")
            return False
        return True
    named = _os_of_official(path, ref.tag)
    known = {n for o in ctx.tables.os.values() for n in (o.id, f"{o.family}{o.codename}")}
    if named in known and named not in (osinfo.id, f"{osinfo.family}{osinfo.codename}"):
        ctx.bad(rv, "base_image", f"{ref_text} is not {osinfo.id}, the variant's os",
                f"use {osinfo.family}:{osinfo.version} or set os to match")
        return False
    return True


def base_source(ctx: Ctx, rv: RawVariant, osinfo: OSInfo, chosen: dict[str, str]) -> BaseSource | None:
    v = rv.values
    if v.get("base_image") == "bootstrap":
        if not osinfo.archive_keys or not osinfo.keyring:
            # apt would have nothing to verify the mirror with: refuse before anything builds
            keyed = sorted(o for o, info in ctx.tables.os.items() if info.archive_keys and info.keyring)
            ctx.bad(rv, "base_image", f"{osinfo.id} has no archive key fingerprints in compat/data/os.yaml, so a "
                    "bootstrap cannot verify its mirror", f"OSes that bootstrap: {', '.join(keyed)}; or a "
                    "registry base_image")
            return None
        return BaseSource(
            kind="bootstrap",
            mirror=v.get("mirror") or osinfo.mirror,
            snapshot=v.get("snapshot"),
            packages=tuple(v.get("bootstrap_packages") or ()),
        )
    ref = v.get("base_image")
    ok = True
    if ref is None:
        ref = ctx.tables.os_images[osinfo.id]
        chosen["base_image"] = f"{ref} (the official {osinfo.id} image; pin a digest for reproducible builds)"
    elif not _check_registry_base(ctx, rv, ref, osinfo):
        ok = False
    for name in _BOOTSTRAP_ONLY:
        if name in v:
            ctx.bad(rv, name, f"{name} only applies to base_image: bootstrap (this variant's base is {ref})",
                    "remove it, or set base_image: bootstrap")
            ok = False
    return BaseSource(kind="registry", ref=ref) if ok else None


def torch_index(ctx: Ctx, rv: RawVariant, release: TorchRelease, chosen: dict[str, str]) -> str | None:
    """None means PyPI (the release's default CUDA variant). Override order: --torch-index-url, then the matrix's
    `torch_index_url`; "none" forces PyPI (e.g. a wheelhouse or a pip index that mirrors PyTorch's). This is the one
    place the override is applied: render and the local version label (`+cu130`) follow the variant's result."""
    for value, source in ((ctx.inputs.torch_index_url, "--torch-index-url"),
                          (rv.values.get("torch_index_url"), "torch_index_url")):
        if value:
            if value.strip().lower() == "none":
                chosen["torch_index_url"] = f"PyPI ({source} none)"
                return None
            return value
    cuda = rv.values["cuda"]
    if cuda != "cpu" and cuda == release.pypi_default:
        return None
    return f"{ctx.tables.index_base}/{cuda_tag(cuda)}"
