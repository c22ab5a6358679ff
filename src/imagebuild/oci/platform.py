"""Is the manifest an index lists under a platform an image of that platform? Read from the registry by digest: the
manifest (an image manifest, never a nested index), then its config blob, whose `os`, `architecture` and `variant`
are what a node runs (the index entry's platform is only what the index claims).

    why = platform_mismatch(client, "ml/pytorch", "sha256:…", "linux/arm64", "REF")   # None: it is that platform

Platforms compare as containerd normalises them: `aarch64` is arm64, `x86_64` amd64, and a variant that is the
architecture's default (arm64/v8, amd64/v1, arm/v7) is the same as none. A config that names no os or architecture
is no proof of a platform: refused, as a mismatch is.
"""

from __future__ import annotations

from typing import Any, Protocol

from imagebuild.oci.answers import image_manifest, is_index, parse_object
from imagebuild.oci.registry import RegistryError

CONFIG_MAX_BYTES = 4 << 20  # an image config: a few KB (its history); far more is no config
_ARCH_ALIASES = {"aarch64": "arm64", "x86_64": "amd64", "x86-64": "amd64", "armhf": "arm", "armel": "arm"}
_DEFAULT_VARIANT = {"arm64": "v8", "amd64": "v1", "arm": "v7"}


class ManifestReader(Protocol):
    def manifest_raw(self, repository: str, reference: str) -> tuple[bytes, str, str]: ...

    def blob(self, repository: str, digest: str, max_bytes: int = ...) -> bytes: ...


def normalized(platform: str) -> str:
    """`os/architecture[/variant]` as containerd matches it (see the module docstring)."""
    parts = [p.strip().lower() for p in platform.split("/")]
    os_name, arch, variant = (parts + ["", "", ""])[:3]
    arch = _ARCH_ALIASES.get(arch, arch)
    if variant == _DEFAULT_VARIANT.get(arch):
        variant = ""
    return "/".join(p for p in (os_name, arch, variant) if p)


def descriptor_platform(platform: dict[str, str]) -> str:
    """An index entry's platform object as `os/architecture[/variant]`."""
    return "/".join(platform[k] for k in ("os", "architecture", "variant") if platform.get(k))


def config_platform(config: dict[str, Any]) -> str:
    """An image config's own platform (`os`, `architecture`, `variant`); "" where it names no os or architecture."""
    values = [config.get(k) for k in ("os", "architecture", "variant")]
    if not all(isinstance(v, str) for v in values[:2]) or not values[0] or not values[1]:
        return ""
    return "/".join(str(v) for v in values if isinstance(v, str) and v)


def manifest_platform(client: ManifestReader, repository: str, digest: str, what: str) -> str:
    """The platform of the image manifest `repository@digest` (its config's); RegistryError naming `what` when the
    registry does not serve it, serves an index or something that is no image manifest."""
    body, media_type, served = client.manifest_raw(repository, digest)
    if served != digest:
        raise RegistryError(f"{what}: the registry serves {served} for {digest}")
    doc = parse_object(body, f"{what} ({digest})")
    if is_index(doc, media_type):
        raise RegistryError(f"{what}: {digest} is itself an image index, not a platform's image")
    config = image_manifest(doc, f"{what} ({digest})").config
    cfg = parse_object(client.blob(repository, config.digest, max_bytes=CONFIG_MAX_BYTES),
                       f"{what}: image config {config.digest}")
    return config_platform(cfg)


def platform_mismatch(client: ManifestReader, repository: str, digest: str, listed: str, what: str) -> str | None:
    """Why `repository@digest` is not an image of the platform `listed` (None: it is). The registry's own errors
    (RegistryError) are the caller's to tell."""
    actual = manifest_platform(client, repository, digest, what)
    if not actual:
        return f"its image config names no os/architecture, so it is not shown to be {listed}"
    if normalized(actual) != normalized(listed):
        return f"its image config says {actual}, not {listed}"
    return None
