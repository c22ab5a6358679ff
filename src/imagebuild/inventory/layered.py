"""A local image's files read layer by layer from the archive its BuildKit build kept (engine/held.py), each layer's
picks kept by the layer's diff ID, so that a rebuild which added one layer reads that layer only (issue 44: the SBOM
of a one-package rebuild read the whole 1.9 GB runtime again, 10 s of its 58).

A layer's picks are a small tar of what an inventory reads in it (tarpick.wanted: the dpkg database, Python
metadata, copyright files, the code-server pin) and its whiteouts, in the layer's own order; the image's files are
those picks folded in layer order by the same Collector that reads whole layers (tarpick.py), so both ways give the
same files. What the picks are made of is bound to bytes: the archive's manifest must be the image ID asked for (the
containerd store's IDs are manifest digests) and hash to it, the config must hash to the manifest's descriptor, and a
layer read here must hash to its descriptor (compressed) and to its diff ID (uncompressed) before its picks are kept.

`held_files` answers None when there is no such archive or it is not exactly this image's (the classic builder keeps
none): the caller reads the image from the engine as before. A damaged archive is a LayerProblem naming the blob.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zlib
from pathlib import Path
from typing import IO, Protocol, cast

import zstandard

from imagebuild.engine import held
from imagebuild.errors import ImagebuildError
from imagebuild.inventory import bundled, dpkg, pydist, tarpick
from imagebuild.inventory.model import ImageFiles
from imagebuild.oci import RegistryError
from imagebuild.oci.answers import image_config, image_manifest

FORMAT = 1  # of the picks tar (part of its kept name: pipeline/keptfiles.py)
MAX_JSON = 4 << 20
_CHUNK = 1 << 20
_LAYER_TYPES = {"application/vnd.oci.image.layer.v1.tar+zstd": "zst",
                "application/vnd.oci.image.layer.v1.tar+gzip": "gz",
                "application/vnd.docker.image.rootfs.diff.tar.gzip": "gz",
                "application/vnd.oci.image.layer.v1.tar": ""}


class LayerProblem(ImagebuildError):
    """The kept image says one thing and holds another (a blob of other bytes, a layer that is no tar)."""


class PicksStore(Protocol):
    """Where a layer's picks are kept by its diff ID (pipeline/keptfiles.py: record/derived.py)."""

    def get(self, diff_id: str) -> bytes | None: ...

    def put(self, diff_id: str, picks: bytes) -> None: ...


def picks_of(stream: tarpick.Readable) -> bytes:
    """The picks tar of one uncompressed layer stream (read to its end): the wanted regular files (at most
    tarpick.MAX_FILE bytes), hard links at wanted paths, every whiteout and opaque marker, in the layer's order."""
    out = io.BytesIO()
    with tarfile.open(fileobj=cast(IO[bytes], stream), mode="r|") as tar, \
            tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as picks:
        for member in tar:
            path = tarpick.clean(member.name)
            if path.rpartition("/")[2].startswith(tarpick.WHITEOUT):
                picks.addfile(_entry(member.name, tarfile.REGTYPE))
                continue
            if not path or not tarpick.wanted(path):
                continue
            if member.islnk():
                link = _entry(member.name, tarfile.LNKTYPE)
                link.linkname = member.linkname
                picks.addfile(link)
            elif member.isfile() and member.size <= tarpick.MAX_FILE:
                f = tar.extractfile(member)
                if f is not None:
                    data = f.read()
                    info = _entry(member.name, tarfile.REGTYPE)
                    info.size = len(data)
                    picks.addfile(info, io.BytesIO(data))
        while stream.read(_CHUNK):  # what the tar reader leaves (end-of-archive blocks): every byte hashed
            pass
    return out.getvalue()


def _entry(name: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, 0o644, 0
    return info


def held_files(image_id: str, store: PicksStore, root: Path | None = None) -> ImageFiles | None:
    """The files of local image `image_id` from the image its build kept, layer by layer (module doc); None when no
    archive of exactly that image is kept."""
    archive = held.find(image_id, root)
    if archive is None:
        return None
    try:
        with held.open_image(archive) as tar:
            return _fold(tar, image_id, store)
    except (OSError, tarfile.TarError) as exc:
        raise LayerProblem(f"{archive}: the kept image cannot be read ({exc})") from None


def _fold(tar: held.BlobSource, image_id: str, store: PicksStore) -> ImageFiles | None:
    entry = held.index_entry(tar)
    if entry is None or entry.get("digest") != image_id:
        return None
    manifest_bytes = _read(tar, image_id, None)
    try:
        doc = json.loads(manifest_bytes)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        manifest = image_manifest(doc, f"the kept manifest {image_id}")
        config = json.loads(_read(tar, manifest.config.digest, manifest.config.size))
        diff_ids = image_config(config, f"the kept config {manifest.config.digest}").diff_ids if \
            isinstance(config, dict) else ()
    except (ValueError, RecursionError, RegistryError) as exc:
        raise LayerProblem(f"the kept manifest {image_id} or its config is not what an image's is ({exc})") from None
    if len(diff_ids) != len(manifest.layers):
        raise LayerProblem(f"the kept image {image_id} lists {len(manifest.layers)} layers and {len(diff_ids)} "
                           "diff IDs")
    collector = tarpick.Collector()
    for desc, diff_id in zip(manifest.layers, diff_ids, strict=True):
        picks = store.get(diff_id)
        if picks is None:
            compression = _LAYER_TYPES.get(desc.media_type)
            if compression is None:
                raise LayerProblem(f"layer {desc.digest} has media type {desc.media_type!r}")
            picks = _read_layer(tar, desc.digest, desc.size, diff_id, compression)
            store.put(diff_id, picks)
        collector.add_layer(io.BytesIO(picks))
    found = collector.files
    return ImageFiles(os_release=tarpick.os_release(found), debs=tuple(dpkg.read_database(found)),
                      pythons=tuple(pydist.read_distributions(found)), bundled=bundled.read_bundled(found))


def _member(tar: held.BlobSource, digest: str) -> tarfile.TarInfo:
    try:
        return held.blob_member(tar, digest)
    except held.BlobProblem as exc:
        raise LayerProblem(f"the kept image: {exc}") from None


def _read(tar: held.BlobSource, digest: str, size: int | None) -> bytes:
    """A small blob (a manifest, a config), checked against its digest (and size, when one is given)."""
    try:
        return held.read_blob(tar, digest, MAX_JSON, size)
    except held.BlobProblem as exc:
        raise LayerProblem(f"the kept image: {exc}") from None


def _read_layer(tar: held.BlobSource, digest: str, size: int, diff_id: str, compression: str) -> bytes:
    """One layer's picks, its compressed bytes checked against `digest` and `size`, its tar against `diff_id`."""
    fh = tar.extractfile(_member(tar, digest))
    assert fh is not None
    packed = tarpick.HashingReader(fh)
    plain: IO[bytes]
    if compression == "zst":
        plain = zstandard.ZstdDecompressor().stream_reader(cast(IO[bytes], packed), read_across_frames=True,
                                                           closefd=False)
    elif compression == "gz":
        plain = cast(IO[bytes], gzip.GzipFile(fileobj=cast(IO[bytes], packed), mode="rb"))
    else:
        plain = cast(IO[bytes], packed)
    tarred = tarpick.HashingReader(plain)
    try:
        picks = picks_of(tarred)
        while packed.read(_CHUNK):  # a compressed stream's trailing bytes: the whole blob hashed
            pass
    except (tarfile.TarError, EOFError, zlib.error, zstandard.ZstdError, OSError) as exc:
        raise LayerProblem(f"layer {digest} of the kept image is not a readable tar stream ({exc})") from None
    if packed.digest() != digest or packed.size != size:
        raise LayerProblem(f"the kept image's layer {digest} holds other bytes ({packed.digest()}, {packed.size} "
                           f"bytes)")
    if tarred.digest() != diff_id:
        raise LayerProblem(f"layer {digest} of the kept image unpacks to {tarred.digest()}, not its diff ID "
                           f"{diff_id}")
    return picks
