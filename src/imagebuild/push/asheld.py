"""An image pushed as the engine holds it: its own manifest and blobs, byte for byte, when they already are what the
push asks for (issue 44: push from where the bytes are).

The BuildKit backend exports zstd layers with OCI media types (builder/backends/buildkit/argv.py) and loads them
into the engine; on the containerd image store the engine keeps those exact blobs and the image's ID is the digest
of that manifest. Compressing them again (push/compress.py) cost the first push of the CPU matrix 8.5x an engine's
own push and gave the registry a manifest of another digest than the image the build made and the tests ran. Here,
when the saved image (`docker save` of the containerd store: an OCI layout with `index.json`) names exactly one image
manifest whose layers all carry the requested compression's media type, that manifest's bytes and its blobs go to
the `dir:` folder unchanged: the pushed digest IS the engine's image ID.

Bound to bytes, nothing trusted by name: the manifest is read by the digest `index.json` gives and must hash to it
(and to the image ID asked for, when that is a manifest digest); the config and every layer are hashed while they
are copied and must match the manifest's descriptor (digest and size). Anything else (the classic store's
`manifest.json`-only archive, gzip layers for a zstd push, an index of several platforms, a foreign media type)
answers None and the caller compresses as before: the classic path keeps what works.

The archive a build kept stays where it is, so its layers are copied out only when the push asks for them, for the
digests the registry lacks (`lazy`, `Prepared.fill`): a push after a one-package rebuild copies that layer, not the
whole image. A kept layer of other bytes found then is dropped for the engine's save (push/skopeo.py).
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Collection
from pathlib import Path
from typing import IO

from imagebuild.engine.held import index_entry
from imagebuild.oci import RegistryError
from imagebuild.oci.answers import image_manifest, is_index
from imagebuild.push.compress import (
    DOCKER_MANIFEST,
    OCI_LAYER,
    OCI_MANIFEST,
    LayerError,
    Prepared,
)

# the manifest and layer media types a push of each compression writes (compress.py writes the same)
MANIFEST_TYPE = {"zstd": OCI_MANIFEST, "gzip": DOCKER_MANIFEST}
MAX_MANIFEST = 4 << 20
_CHUNK = 1 << 20


def as_held(archive: Path, layout: Path, compression: str, image_id: str = "", *,
            exact: bool = False, lazy: bool = False) -> Prepared | None:
    """The saved image's own manifest and blobs in a `dir:` layout, or None when they are not already the requested
    compression (module doc). LayerError when the archive says one thing and holds another (a blob of other bytes).
    `exact`: an archive kept by the build (engine/held.py) counts only when its manifest IS `image_id` (else None).
    `lazy` (an archive that stays: the build's kept one): the layers are copied only when the push asks for them
    (`Prepared.fill`, with the digests the registry lacks), each hashed as it is: a one-layer rebuild copies one
    layer, not the whole image again (a blob the registry has is its bytes by digest)."""
    with tarfile.open(archive) as tar:
        entry = index_entry(tar)  # None: the classic store's save (no manifest of its own), an index of several
        media = MANIFEST_TYPE.get(compression, "")
        if entry is None or entry.get("mediaType") != media:
            return None
        digest = str(entry["digest"])
        if exact and digest != image_id:
            return None
        body = _read(tar, _blob_name(digest), MAX_MANIFEST)
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise LayerError(f"the saved manifest does not hash to {digest}, the digest its index.json gives")
        if image_id.startswith("sha256:") and image_id != digest and _is_manifest_id(image_id, tar):
            raise LayerError(f"the engine saved manifest {digest} for image {image_id}")
        try:
            doc = json.loads(body)
            if not isinstance(doc, dict) or is_index(doc, media) or doc.get("mediaType", media) != media:
                return None
            manifest = image_manifest(doc, "the saved manifest")
        except (ValueError, RegistryError):
            return None
        layer_type = OCI_LAYER[compression]
        if not manifest.layers or any(layer.media_type != layer_type for layer in manifest.layers):
            return None
        layout.mkdir(parents=True)
        (layout / "version").write_text("Directory Transport Version: 1.1\n")
        sizes = {d.digest: d.size for d in manifest.layers}
        for desc in ((manifest.config,) if lazy else (manifest.config, *manifest.layers)):
            _copy_into(tar, layout, desc.digest, desc.size)

    def fill(wanted: Collection[str]) -> None:
        """The layers among `wanted` into the layout, each checked against its descriptor."""
        todo = [d for d in sizes if d in wanted and not (layout / d.removeprefix("sha256:")).exists()]
        if todo:
            with tarfile.open(archive) as tar:
                for d in todo:
                    _copy_into(tar, layout, d, sizes[d])

    (layout / "manifest.json").write_bytes(body)
    return Prepared(layout, digest, body, media, (manifest.config.digest, manifest.config.size),
                    tuple((d.digest, d.size, d.media_type) for d in manifest.layers), compression, reused=0,
                    as_held=True, fill=fill if lazy else None)


def _copy_into(tar: tarfile.TarFile, layout: Path, digest: str, size: int) -> None:
    target = layout / digest.removeprefix("sha256:")
    if not target.exists():
        _copy_checked(tar, _blob_name(digest), target, digest, size)


def _blob_name(digest: str) -> str:
    algorithm, _, hexd = digest.partition(":")
    return f"blobs/{algorithm}/{hexd}"


def _is_manifest_id(image_id: str, tar: tarfile.TarFile) -> bool:
    """Whether `image_id` names a manifest blob of this archive (the containerd store's IDs are manifest digests;
    the classic store's are config digests, which a manifest legitimately differs from)."""
    try:
        doc = json.loads(_read(tar, _blob_name(image_id), MAX_MANIFEST))
    except (KeyError, ValueError):
        return False
    return isinstance(doc, dict) and "config" in doc


def _read(tar: tarfile.TarFile, name: str, limit: int) -> bytes:
    member = tar.getmember(name)
    if not member.isfile() or member.size > limit:
        raise LayerError(f"docker-archive: {name} is not a file of at most {limit} bytes")
    with _open(tar, member) as fh:
        return fh.read()


def _open(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    fh = tar.extractfile(member)
    if fh is None:
        raise LayerError(f"docker-archive: {member.name} is not a file")
    return fh


def _copy_checked(tar: tarfile.TarFile, name: str, target: Path, digest: str, size: int) -> None:
    try:
        member = tar.getmember(name)
    except KeyError:
        raise LayerError(f"the saved image lacks {digest}, which its manifest lists") from None
    hasher, written = hashlib.sha256(), 0
    partial = target.with_name(target.name + ".partial")
    try:
        with _open(tar, member) as src, partial.open("wb") as out:
            while chunk := src.read(_CHUNK):
                hasher.update(chunk)
                written += len(chunk)
                out.write(chunk)
        if "sha256:" + hasher.hexdigest() != digest or written != size:
            raise LayerError(f"the saved blob {digest} holds other bytes (sha256:{hasher.hexdigest()}, {written} "
                             f"bytes; the manifest says {size})")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
