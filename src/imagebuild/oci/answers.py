"""What a registry answers, checked before anything reads a field of it: manifests, indexes and image configs.

A registry (or a proxy in front of it) is not trusted to answer what the distribution spec says: a login page
instead of JSON, a manifest without `config`, a layer size that is text, labels that are a list. Every reader of
registry answers (catalog, the SBOM/inventory reader) takes the parsed, typed values from here, so a wrong answer is
one RegistryError naming the image and the field (`error:` line, exit 1), never a traceback or a wrong row.
Sizes of the answers themselves are bounded by the client (registry.MAX_MANIFEST_BYTES, blob `max_bytes`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from imagebuild.oci.registry import RegistryError

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
MAX_LAYERS = 1000  # OCI images are limited to 127 layers by overlayfs; a thousand is no image an engine runs


def parse_object(body: bytes, what: str) -> dict[str, Any]:
    """`body` as a JSON object; RegistryError naming `what` when it is not (a proxy's HTML login page, a truncation)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        start = body[:40].decode("utf-8", "replace").strip().replace("\n", " ")
        raise RegistryError(f"{what}: the registry answered something that is not JSON ({len(body)} bytes starting "
                            f"{start!r}; a proxy's login page?)") from None
    if not isinstance(doc, dict):
        raise RegistryError(f"{what}: the registry answered JSON that is not an object")
    return doc


@dataclass(frozen=True)
class Descriptor:
    """A content descriptor: a layer, a config or an index entry."""

    digest: str
    size: int
    media_type: str = ""
    platform: dict[str, str] = field(default_factory=dict)  # index entries: os, architecture, variant (strings)

    @property
    def platform_name(self) -> str:
        return f"{self.platform.get('os')}/{self.platform.get('architecture')}"


def _descriptor(value: object, what: str) -> Descriptor:
    if not isinstance(value, dict):
        raise RegistryError(f"{what}: not an object")
    digest, size, media = value.get("digest"), value.get("size", 0), value.get("mediaType", "")
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise RegistryError(f"{what}: digest {str(digest)[:80]!r} is not sha256:<64 hex>")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise RegistryError(f"{what}: size {str(size)[:40]!r} is not a byte count")
    if not isinstance(media, str):
        raise RegistryError(f"{what}: mediaType is not a string")
    platform = value.get("platform") or {}
    if not isinstance(platform, dict) or not all(isinstance(v, str) for k, v in platform.items()
                                                   if k in ("os", "architecture", "variant")):
        raise RegistryError(f"{what}: platform is not an object of strings")
    keep = {k: str(platform[k]) for k in ("os", "architecture", "variant") if k in platform}
    return Descriptor(digest, size, media, keep)


def is_index(doc: dict[str, Any], media_type: str = "") -> bool:
    return (doc.get("mediaType") or media_type) in INDEX_TYPES or ("manifests" in doc and "layers" not in doc)


INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
               "application/vnd.docker.distribution.manifest.list.v2+json")


def index_entries(doc: dict[str, Any], what: str) -> list[Descriptor]:
    entries = doc.get("manifests")
    if not isinstance(entries, list):
        raise RegistryError(f"{what}: the index has no list of manifests")
    return [_descriptor(e, f"{what}: index entry {n}") for n, e in enumerate(entries[:MAX_LAYERS])]


@dataclass(frozen=True)
class ImageManifest:
    config: Descriptor
    layers: tuple[Descriptor, ...]

    @property
    def layers_size(self) -> int:
        """The compressed bytes a pull downloads."""
        return sum(layer.size for layer in self.layers)


def image_manifest(doc: dict[str, Any], what: str) -> ImageManifest:
    """The config and layers of an image manifest; RegistryError when one is missing or of the wrong type."""
    if "config" not in doc:
        raise RegistryError(f"{what}: the manifest has no config (not an image manifest)")
    config = _descriptor(doc["config"], f"{what}: manifest config")
    layers = doc.get("layers", [])
    if not isinstance(layers, list):
        raise RegistryError(f"{what}: the manifest's layers are not a list")
    if len(layers) > MAX_LAYERS:
        raise RegistryError(f"{what}: the manifest lists {len(layers)} layers (more than {MAX_LAYERS})")
    return ImageManifest(config, tuple(_descriptor(layer, f"{what}: layer {n}") for n, layer in enumerate(layers)))


@dataclass(frozen=True)
class ImageConfig:
    labels: dict[str, str]
    created: str | None
    architecture: str
    os: str
    diff_ids: tuple[str, ...]
    history: tuple[dict[str, Any], ...]


def _text(value: object, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise RegistryError(f"{what} is not a string ({type(value).__name__})")


def config_diff_ids(doc: dict[str, Any]) -> list[str]:
    """An image config's `rootfs.diff_ids` as they stand, unchecked (image_config checks them): the layers it lists,
    bottom first."""
    return [str(d) for d in ((doc.get("rootfs") or {}).get("diff_ids") or [])]


def image_config(doc: dict[str, Any], what: str) -> ImageConfig:
    """The fields of an image config the tool reads, typed; RegistryError naming the field otherwise."""
    inner = doc.get("config") or {}
    if not isinstance(inner, dict):
        raise RegistryError(f"{what}: image config: `config` is not an object")
    labels = inner.get("Labels") or {}
    if not isinstance(labels, dict):
        raise RegistryError(f"{what}: image config: Labels is not an object ({type(labels).__name__})")
    for key, value in labels.items():
        if not isinstance(value, str):
            raise RegistryError(f"{what}: image config: label {str(key)[:80]!r} is not a string "
                                f"({type(value).__name__})")
    rootfs = doc.get("rootfs") or {}
    diff_ids = rootfs.get("diff_ids") or [] if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list) or not all(isinstance(d, str) and DIGEST.fullmatch(d) for d in diff_ids):
        raise RegistryError(f"{what}: image config: rootfs.diff_ids is not a list of sha256 digests")
    history = doc.get("history") or []
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        raise RegistryError(f"{what}: image config: history is not a list of objects")
    return ImageConfig(labels=dict(labels), created=_text(doc.get("created"), f"{what}: image config: created"),
                       architecture=_text(doc.get("architecture"), f"{what}: image config: architecture") or "",
                       os=_text(doc.get("os"), f"{what}: image config: os") or "",
                       diff_ids=tuple(diff_ids), history=tuple(history))
