"""An image in a registry, read without an engine: manifest (an index is narrowed to one platform), config (labels,
created, diff_ids, history), then every layer blob streamed in order through the same file filter as local images,
with whiteouts applied. Nothing is pulled into the engine, so reading changes no local state; the cost is one
download of the image's layers (each checked against its digest while it streams).
"""

from __future__ import annotations

import platform as _platform
import tarfile
import zlib
from typing import IO

import zstandard

from imagebuild.errors import ImagebuildError
from imagebuild.inventory import bundled, dpkg, pydist, tarpick
from imagebuild.inventory.model import Inventory, Layer
from imagebuild.inventory.tarpick import Readable
from imagebuild.oci import Reference, RegistryClient, RegistryError
from imagebuild.oci.answers import (
    Descriptor,
    image_config,
    image_manifest,
    index_entries,
    is_index,
    parse_object,
)

_GZIP = ("application/vnd.docker.image.rootfs.diff.tar.gzip", "application/vnd.oci.image.layer.v1.tar+gzip",
         "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
         "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip")
_ZSTD = ("application/vnd.oci.image.layer.v1.tar+zstd",
         "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd")
_PLAIN = ("application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.nondistributable.v1.tar")
_MACHINE_TO_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le",
                      "s390x": "s390x"}


def host_platform() -> str:
    machine = _platform.machine().lower()
    return f"linux/{_MACHINE_TO_GOARCH.get(machine, machine)}"


def _pick(entries: list[Descriptor], platform: str, ref: Reference) -> str:
    want_os, _, want_arch = platform.partition("/")
    want_arch, _, want_variant = want_arch.partition("/")
    for entry in entries:
        plat = entry.platform
        if plat.get("os") == want_os and plat.get("architecture") == want_arch and (
                not want_variant or plat.get("variant") == want_variant):
            return entry.digest
    offered = sorted({e.platform_name for e in entries})
    raise ImagebuildError(f"{ref}: no {platform} image in its index; it has: {', '.join(offered)}")


def read_registry(client: RegistryClient, ref: Reference, platform: str | None = None) -> Inventory:
    """The inventory of a registry image. RegistryError (status 404) when the reference does not exist, RegistryError
    naming the image and the field when an answer is not what the registry spec says (oci.answers)."""
    repo, what = ref.repository, str(ref)
    body, media, digest = client.manifest_raw(repo, ref.digest or ref.tag or "latest")
    doc = parse_object(body, f"{what}: manifest")
    if is_index(doc, media):
        child = _pick(index_entries(doc, what), platform or host_platform(), ref)
        body, media, _ = client.manifest_raw(repo, child)
        doc = parse_object(body, f"{what}: manifest {child}")
        if is_index(doc, media):
            raise RegistryError(f"{what}: the index names {child}, which is another index, not an image")
    manifest = image_manifest(doc, what)
    config_digest = manifest.config.digest
    config = image_config(parse_object(client.blob(repo, config_digest), f"{what}: image config {config_digest}"),
                          what)
    diff_ids = list(config.diff_ids)
    blobs = manifest.layers
    if len(blobs) != len(diff_ids):
        raise ImagebuildError(f"{ref}: manifest has {len(blobs)} layers, config {len(diff_ids)} diff_ids")
    collector = tarpick.Collector()
    for blob in blobs:
        stream, compression = _open_layer(client, repo, ref, blob)
        try:
            collector.add_layer(stream, compression)
        except (tarfile.TarError, EOFError, zlib.error, zstandard.ZstdError, OSError) as exc:
            raise ImagebuildError(f"{ref}: layer {blob.digest}: not a readable tar stream ({exc})") from None
    found = collector.files
    history = [h for h in config.history if not h.get("empty_layer")]
    created_by = [str(h.get("created_by") or "") for h in history] if len(history) == len(diff_ids) else []
    return Inventory(
        reference=str(ref),
        image_id=config_digest,
        created=config.created or "",
        architecture=config.architecture,
        os=config.os,
        repo_digests=(f"{ref.name}@{digest}",),
        labels=dict(sorted(config.labels.items())),
        layers=tuple(Layer(d, b.size, created_by[i] if created_by else "")
                     for i, (d, b) in enumerate(zip(diff_ids, blobs, strict=True))),
        size_kind="compressed",
        os_release=tarpick.os_release(found),
        debs=tuple(dpkg.read_database(found)),
        pythons=tuple(pydist.read_distributions(found)),
        source="registry",
        bundled=bundled.read_bundled(found),
    )


def _open_layer(client: RegistryClient, repo: str, ref: Reference, blob: Descriptor) -> tuple[Readable, str]:
    media = blob.media_type
    if media in _GZIP:
        compression = "gz"
    elif media in _ZSTD:
        compression = "zst"
    elif media in _PLAIN:
        compression = ""
    else:
        raise ImagebuildError(f"{ref}: layer {blob.digest} has media type {media!r}, which this reader cannot"
                              " unpack (gzip, zstd or plain tar only)")
    digest = blob.digest
    return _Checked(client.open_blob(repo, digest), digest, f"{ref.name}@{digest}"), compression


class _Checked(tarpick.HashingReader):
    """A hashing layer stream that raises at its end when the bytes do not match the digest."""

    def __init__(self, raw: IO[bytes], digest: str, what: str) -> None:
        super().__init__(raw)
        self.blob: IO[bytes] = raw
        self.expected = digest
        self.what = what

    def read(self, n: int = -1, /) -> bytes:
        data = super().read(n)
        if not data or n < 0:
            self.blob.close()
            actual = self.digest()
            if actual != self.expected:
                raise RegistryError(f"{self.what}: downloaded layer has digest {actual}")
        return data
