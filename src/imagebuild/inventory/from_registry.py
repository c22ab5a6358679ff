"""An image in a registry, read without an engine: manifest (an index is narrowed to one platform), config (labels,
created, diff_ids, history), then every layer blob streamed in order through the same file filter as local images,
with whiteouts applied. Nothing is pulled into the engine, so reading changes no local state; the cost is one
download of the image's layers (each checked against its digest while it streams).
"""

from __future__ import annotations

import hashlib
import json
import platform as _platform
import tarfile
import zlib
from typing import IO, Any

import zstandard

from imagebuild.errors import ImagebuildError
from imagebuild.inventory import dpkg, pydist, tarpick
from imagebuild.inventory.model import Inventory, Layer
from imagebuild.inventory.tarpick import Readable
from imagebuild.oci import Reference, RegistryClient, RegistryError

INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
               "application/vnd.docker.distribution.manifest.list.v2+json")
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


class _Hashing:
    """Reads a blob stream and hashes every byte, so the digest is checked without holding the blob."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.sha = hashlib.sha256()

    def read(self, n: int = -1, /) -> bytes:
        data = self.raw.read(n)
        self.sha.update(data)
        return data


def _pick(index: dict[str, Any], platform: str, ref: Reference) -> str:
    want_os, _, want_arch = platform.partition("/")
    want_arch, _, want_variant = want_arch.partition("/")
    offered = []
    for entry in index.get("manifests") or []:
        plat = entry.get("platform") or {}
        offered.append(f"{plat.get('os')}/{plat.get('architecture')}")
        if plat.get("os") == want_os and plat.get("architecture") == want_arch and (
                not want_variant or plat.get("variant") == want_variant):
            return str(entry["digest"])
    raise ImagebuildError(f"{ref}: no {platform} image in its index; it has: {', '.join(sorted(set(offered)))}")


def read_registry(client: RegistryClient, ref: Reference, platform: str | None = None) -> Inventory:
    """The inventory of a registry image. RegistryError (status 404) when the reference does not exist."""
    repo = ref.repository
    body, media, digest = client.manifest_raw(repo, ref.digest or ref.tag or "latest")
    doc = json.loads(body)
    if (doc.get("mediaType") or media) in INDEX_TYPES or "manifests" in doc:
        body, media, _ = client.manifest_raw(repo, _pick(doc, platform or host_platform(), ref))
        doc = json.loads(body)
    config_digest = str(doc["config"]["digest"])
    config = json.loads(client.blob(repo, config_digest))
    diff_ids = [str(d) for d in (config.get("rootfs") or {}).get("diff_ids") or []]
    blobs = doc.get("layers") or []
    if len(blobs) != len(diff_ids):
        raise ImagebuildError(f"{ref}: manifest has {len(blobs)} layers, config {len(diff_ids)} diff_ids")
    collector = tarpick.Collector()
    for blob in blobs:
        stream, compression = _open_layer(client, repo, ref, blob)
        try:
            collector.add_layer(stream, compression)
        except (tarfile.TarError, EOFError, zlib.error, zstandard.ZstdError, OSError) as exc:
            raise ImagebuildError(f"{ref}: layer {blob.get('digest')}: not a readable tar stream ({exc})") from None
    found = collector.files
    history = [h for h in config.get("history") or [] if not h.get("empty_layer")]
    created_by = [str(h.get("created_by") or "") for h in history] if len(history) == len(diff_ids) else []
    image_config = config.get("config") or {}
    return Inventory(
        reference=str(ref),
        image_id=config_digest,
        created=str(config.get("created") or ""),
        architecture=str(config.get("architecture") or ""),
        os=str(config.get("os") or ""),
        repo_digests=(f"{ref.name}@{digest}",),
        labels=dict(sorted((image_config.get("Labels") or {}).items())),
        layers=tuple(Layer(d, int(b.get("size") or 0), created_by[i] if created_by else "")
                     for i, (d, b) in enumerate(zip(diff_ids, blobs, strict=True))),
        size_kind="compressed",
        os_release=tarpick.os_release(found),
        debs=tuple(dpkg.read_database(found)),
        pythons=tuple(pydist.read_distributions(found)),
        source="registry",
    )


def _open_layer(client: RegistryClient, repo: str, ref: Reference, blob: dict[str, Any]) -> tuple[Readable, str]:
    media = str(blob.get("mediaType") or "")
    if media in _GZIP:
        compression = "gz"
    elif media in _ZSTD:
        compression = "zst"
    elif media in _PLAIN:
        compression = ""
    else:
        raise ImagebuildError(f"{ref}: layer {blob.get('digest')} has media type {media!r}, which this reader cannot"
                              " unpack (gzip, zstd or plain tar only)")
    digest = str(blob["digest"])
    return _Checked(client.open_blob(repo, digest), digest, f"{ref.name}@{digest}"), compression


class _Checked(_Hashing):
    """A hashing layer stream that raises at its end when the bytes do not match the digest."""

    def __init__(self, raw: IO[bytes], digest: str, what: str) -> None:
        super().__init__(raw)
        self.digest = digest
        self.what = what

    def read(self, n: int = -1, /) -> bytes:
        data = super().read(n)
        if not data or n < 0:
            self.raw.close()
            actual = "sha256:" + self.sha.hexdigest()
            if actual != self.digest:
                raise RegistryError(f"{self.what}: downloaded layer has digest {actual}")
        return data
