"""An engine's image as compressed blobs, each layer compressed once per content: a cache keyed by diff ID.

Why: a push used to give skopeo the whole `docker save` to compress every time (2 GB of the CPU runtime, 8 GB of a
CUDA runtime: a minute or more of zstd on every push, though one package changed only the last environment layer).
Here each layer of the saved archive is compressed with libzstd (the `zstandard` binding, level 3) or zlib (gzip -6,
no name, mtime 0) only when the cache holds no blob for its diff ID and compression; an unchanged layer is reused,
and so keeps its digest, which the registry already has (it is not sent again either). Output is deterministic
(single-threaded, fixed parameters): the same layer compressed on another machine gives the same blob.

The cache: `$IMAGEBUILD_LAYER_CACHE`, else `$XDG_CACHE_HOME/imagebuild/layers` (`~/.cache/…`): one folder per
compression, `<diff id hex>.blob` beside `<diff id hex>.json` (the blob's digest and size, written last, so a blob
without it is never used). A blob is checked against its recorded digest when used; a damaged one is compressed
again. The oldest entries beyond `IMAGEBUILD_LAYER_CACHE_MAX` (default 20 GiB) are removed after each image.

Input layers may arrive compressed (dockerd 26.1's containerd store saves its content as it holds it): gzip and zstd
are detected by their magic bytes and inflated first; the inflated bytes must hash to the config's diff ID.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import zstandard

from imagebuild.engine.held import cache_root
from imagebuild.errors import ImagebuildError
from imagebuild.files import sha256_file
from imagebuild.oci.answers import config_diff_ids

ZSTD_LEVEL = 3  # CoreWeave's ml-containers' level: most of the size gain, compresses ~8x faster than gzip -6
GZIP_LEVEL = 6
OCI_LAYER = {"zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
             "gzip": "application/vnd.docker.image.rootfs.diff.tar.gzip"}
DEFAULT_MAX = 20 << 30
_CHUNK = 1 << 20


class LayerError(ImagebuildError):
    """A saved layer that is not what the image's config says (its inflated bytes hash to another diff ID)."""


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int
    path: Path
    reused: bool  # taken from the cache, not compressed this time


def _max_bytes() -> int:
    try:
        return int(os.environ.get("IMAGEBUILD_LAYER_CACHE_MAX") or DEFAULT_MAX)
    except ValueError:
        return DEFAULT_MAX


def _inflated(raw: IO[bytes]) -> Iterator[bytes]:
    """The layer tar's bytes, whatever compression it was saved with (none, gzip, zstd; several frames too)."""
    data = raw.read(_CHUNK)
    if data[:2] == b"\x1f\x8b":
        new: Any = lambda: zlib.decompressobj(16 + zlib.MAX_WBITS)  # noqa: E731
    elif data[:4] == b"\x28\xb5\x2f\xfd":
        new = lambda: zstandard.ZstdDecompressor().decompressobj()  # noqa: E731
    else:
        while data:
            yield data
            data = raw.read(_CHUNK)
        return
    inflate = new()
    while data:
        out = inflate.decompress(data)
        if out:
            yield out
        rest = inflate.unused_data
        if inflate.eof and rest:  # another member/frame follows
            inflate = new()
            data = rest
            continue
        data = raw.read(_CHUNK)


class _Compressor:
    def __init__(self, compression: str, out: IO[bytes]) -> None:
        self.hasher = hashlib.sha256()
        self.size = 0
        self._out = out
        if compression == "zstd":
            params = zstandard.ZstdCompressionParameters.from_level(ZSTD_LEVEL, threads=0, write_checksum=False,
                                                                    write_content_size=False)
            self._z: Any = zstandard.ZstdCompressor(compression_params=params).compressobj()
        elif compression == "gzip":
            self._z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip header, mtime 0, no name
        else:
            raise ValueError(f"compression {compression!r}")

    def _write(self, data: bytes) -> None:
        if data:
            self.hasher.update(data)
            self.size += len(data)
            self._out.write(data)

    def add(self, data: bytes) -> None:
        self._write(self._z.compress(data))

    def finish(self) -> None:
        self._write(self._z.flush())


class LayerCache:
    """Compressed layers by (compression, diff ID) under `root`."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_root()

    def _paths(self, compression: str, diff_id: str) -> tuple[Path, Path]:
        folder = self.root / compression
        hexd = diff_id.removeprefix("sha256:")
        return folder / f"{hexd}.blob", folder / f"{hexd}.json"

    def lookup(self, compression: str, diff_id: str) -> Blob | None:
        blob, meta = self._paths(compression, diff_id)
        try:
            info = json.loads(meta.read_text())
            if blob.stat().st_size != int(info["size"]):
                return None
            digest = str(info["digest"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if "sha256:" + sha256_file(blob) != digest:  # damaged on disk: compress again
            return None
        os.utime(meta)  # used now: the last to be pruned
        return Blob(digest, int(info["size"]), blob, reused=True)

    def compress(self, compression: str, diff_id: str, layer: IO[bytes]) -> Blob:
        """Compress `layer` (its bytes must hash to `diff_id` once inflated) into the cache."""
        blob, meta = self._paths(compression, diff_id)
        blob.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=blob.parent, prefix=".partial-")
        try:
            with os.fdopen(fd, "wb") as out:
                packer = _Compressor(compression, out)
                plain = hashlib.sha256()
                for chunk in _inflated(layer):
                    plain.update(chunk)
                    packer.add(chunk)
                packer.finish()
            if "sha256:" + plain.hexdigest() != diff_id:
                raise LayerError(f"a saved layer hashes to sha256:{plain.hexdigest()}, not its diff ID {diff_id}")
            os.replace(tmp, blob)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        digest = "sha256:" + packer.hasher.hexdigest()
        meta_tmp = meta.with_name(meta.name + ".partial")
        meta_tmp.write_text(json.dumps({"digest": digest, "size": packer.size, "diff_id": diff_id}))
        os.replace(meta_tmp, meta)
        return Blob(digest, packer.size, blob, reused=False)

    def get(self, compression: str, diff_id: str, open_layer: Any) -> Blob:
        """The cached blob, else `open_layer()`'s bytes compressed into the cache."""
        found = self.lookup(compression, diff_id)
        if found is not None:
            return found
        with open_layer() as layer:
            return self.compress(compression, diff_id, layer)

    def prune(self, keep: set[str] | None = None) -> None:
        """Remove the least recently used entries beyond the size limit (never one of `keep`: blob paths in use)."""
        keep = keep or set()
        entries = []
        for meta in self.root.glob("*/*.json"):
            blob = meta.with_suffix(".blob")
            try:
                entries.append((meta.stat().st_mtime, blob.stat().st_size if blob.exists() else 0, meta, blob))
            except OSError:
                continue
        total = sum(size for _, size, _, _ in entries)
        for _, size, meta, blob in sorted(entries, key=lambda e: e[0]):
            if total <= _max_bytes():
                break
            if str(blob) in keep:
                continue
            meta.unlink(missing_ok=True)
            blob.unlink(missing_ok=True)
            total -= size


@dataclass(frozen=True)
class Prepared:
    """An image compressed into a skopeo `dir:` folder, ready to be sent by digest (push/skopeo.py sends it)."""

    layout: Path
    digest: str  # the manifest's digest: what the registry will serve
    manifest: bytes  # its exact bytes (tags are PUT with these)
    media_type: str
    config: tuple[str, int]  # digest, size
    layers: tuple[tuple[str, int, str], ...]  # digest, size, media type
    compression: str
    reused: int = 0  # layers taken from the compressed-layer cache, not compressed again
    as_held: bool = False  # the engine's own manifest and blobs, unchanged (push/asheld.py): nothing compressed
    # the layer blobs put into the layout only when asked (the kept archive's: push/asheld.py), before a send, for
    # the digests the registry lacks; None: every blob is in the layout already
    fill: Callable[[Collection[str]], None] | None = field(default=None, compare=False, repr=False)

    @property
    def blobs(self) -> list[tuple[str, int]]:
        return [self.config, *((d, n) for d, n, _ in self.layers)]


OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"


def compress_archive(archive: Path, layout: Path, compression: str, cache: LayerCache) -> Prepared:
    """A one-image docker-archive (`docker save`) as a `dir:` layout: OCI manifest + media types for zstd, Docker
    schema 2 for gzip; the config's bytes kept (so its digest stays the image ID)."""
    layout.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        [entry] = json.loads(_member(tar, "manifest.json"))
        config = _member(tar, str(entry["Config"]))
        diff_ids = config_diff_ids(json.loads(config))
        names = [str(n) for n in entry.get("Layers") or []]
        if len(names) != len(diff_ids):
            raise LayerError(f"the saved image lists {len(names)} layers, its config {len(diff_ids)} diff IDs")
        blobs = []
        for name, diff_id in zip(names, diff_ids, strict=True):
            blobs.append(cache.get(compression, diff_id, lambda n=name: _open(tar, n)))
    (layout / "version").write_text("Directory Transport Version: 1.1\n")
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    (layout / config_digest.removeprefix("sha256:")).write_bytes(config)
    layer_type = OCI_LAYER[compression]
    for blob in blobs:
        target = layout / blob.digest.removeprefix("sha256:")
        if not target.exists():
            try:
                os.link(blob.path, target)
            except OSError:
                shutil.copyfile(blob.path, target)
    oci = compression == "zstd"
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST if oci else DOCKER_MANIFEST,
                "config": {"mediaType": OCI_CONFIG if oci else DOCKER_CONFIG, "digest": config_digest,
                           "size": len(config)},
                "layers": [{"mediaType": layer_type, "digest": b.digest, "size": b.size} for b in blobs]}
    body = json.dumps(manifest, separators=(",", ":")).encode()
    (layout / "manifest.json").write_bytes(body)
    cache.prune(keep={str(b.path) for b in blobs})
    return Prepared(layout, "sha256:" + hashlib.sha256(body).hexdigest(), body, str(manifest["mediaType"]),
                    (config_digest, len(config)), tuple((b.digest, b.size, layer_type) for b in blobs), compression,
                    sum(b.reused for b in blobs))


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    with _open(tar, name) as fh:
        return fh.read()


def _open(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    fh = tar.extractfile(name)
    if fh is None:
        raise LayerError(f"docker-archive: {name} is not a file")
    return fh


