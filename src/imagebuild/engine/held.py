"""The archive a BuildKit build exported and the engine loaded, kept under the image ID it became, so that a push
sends the bytes from where they already are (issue 44): no `docker save` of the image again (the containerd store
saves at about 40 MB/s here: 1.5 s for the 60 MB CPU base, most of that push), nothing compressed again.

The BuildKit backend on the containerd image store exports each image as a docker archive (zstd layers, OCI media
types: builder/backends/buildkit/argv.py) and loads it; the image's ID is then the digest of the archive's one
manifest. `keep` moves that archive here as `<hex of the ID>.tar` when its `index.json` names exactly that digest
(anything else is not kept); `find` gives it back to the push, which still checks every byte against the ID
(push/asheld.py: the manifest hashes to it, each blob to its descriptor) and falls back to the engine's save when
the archive is absent, damaged or another image's. Kept archives are a cache: the oldest beyond
`IMAGEBUILD_HELD_MAX` bytes (default 10 GiB) are removed after each keep.

Reading such an archive's blobs (an OCI layout's `blobs/sha256/<hex>`), every byte checked against the digest it is
read by, is here too (`blob_member`, `read_blob`, `copy_blob`): the push (push/asheld.py) and the SBOM's layer-by-layer
read (inventory/layered.py) both read kept archives.

Where: `$IMAGEBUILD_LAYER_CACHE/held`, else `$XDG_CACHE_HOME/imagebuild/layers/held` (`~/.cache/…`): beside the
push's compressed-layer cache (push/compress.py), whose root is this module's `cache_root`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_HELD_MAX = 10 << 30
_ID = re.compile(r"sha256:([0-9a-f]{64})")
_CHUNK = 1 << 20


class BlobProblem(ValueError):
    """An OCI archive's blob is missing, is no file, is too large, or holds other bytes than its digest."""


def cache_root() -> Path:
    """The root of imagebuild's caches of image bytes: the compressed layers and the kept archives."""
    explicit = os.environ.get("IMAGEBUILD_LAYER_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "imagebuild" / "layers"


def held_root() -> Path:
    return cache_root() / "held"


def _limit() -> int:
    try:
        return int(os.environ.get("IMAGEBUILD_HELD_MAX") or DEFAULT_HELD_MAX)
    except ValueError:
        return DEFAULT_HELD_MAX


def index_entry(tar: tarfile.TarFile) -> dict[str, Any] | None:
    """The one descriptor the archive's `index.json` lists (an OCI layout's, as BuildKit's docker exporter and the
    containerd store's `docker save` write it), with a sha256 digest; None for anything else (no index.json, one
    that is not JSON or over 1 MiB, none or several entries)."""
    try:
        member = tar.getmember("index.json")
        fh = tar.extractfile(member) if member.isfile() and member.size <= 1 << 20 else None
        index = json.loads(fh.read()) if fh is not None else None
    except (KeyError, ValueError):
        return None
    entries = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        return None
    digest = entries[0].get("digest")
    return entries[0] if isinstance(digest, str) and _ID.fullmatch(digest) else None


def blob_member(tar: tarfile.TarFile, digest: str) -> tarfile.TarInfo:
    """The archive's file of blob `digest` (`blobs/<algorithm>/<hex>`, the OCI layout's name); BlobProblem when there
    is none."""
    algorithm, _, hexd = digest.partition(":")
    try:
        member = tar.getmember(f"blobs/{algorithm}/{hexd}")
    except KeyError:
        raise BlobProblem(f"the archive lacks {digest}") from None
    if not member.isfile():
        raise BlobProblem(f"the archive's {digest} is not a file")
    return member


def read_blob(tar: tarfile.TarFile, digest: str, limit: int, size: int | None = None) -> bytes:
    """A small blob (a manifest, a config) of at most `limit` bytes, checked against its digest (and `size`, when
    given): BlobProblem otherwise."""
    member = blob_member(tar, digest)
    if member.size > limit:
        raise BlobProblem(f"the archive's {digest} is {member.size} bytes, over the {limit} a manifest or config has")
    fh = tar.extractfile(member)
    data = fh.read() if fh is not None else b""
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest or (size is not None and len(data) != size):
        raise BlobProblem(f"the archive's {digest} holds other bytes")
    return data


def copy_blob(tar: tarfile.TarFile, digest: str, size: int, target: Path) -> None:
    """Blob `digest` to `target`, hashed as it is copied: BlobProblem (and no `target`) when it holds other bytes than
    its descriptor (`digest`, `size`) says."""
    member = blob_member(tar, digest)
    hasher, written = hashlib.sha256(), 0
    partial = target.with_name(target.name + ".partial")
    try:
        fh = tar.extractfile(member)
        assert fh is not None  # (a file: blob_member)
        with fh, partial.open("wb") as out:
            while chunk := fh.read(_CHUNK):
                hasher.update(chunk)
                written += len(chunk)
                out.write(chunk)
        if "sha256:" + hasher.hexdigest() != digest or written != size:
            raise BlobProblem(f"the blob {digest} holds other bytes (sha256:{hasher.hexdigest()}, {written} bytes; "
                              f"its descriptor says {size})")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


def manifest_digest(archive: Path) -> str | None:
    """The digest of the one manifest the archive's index.json names; None for anything else."""
    try:
        with tarfile.open(archive) as tar:
            entry = index_entry(tar)
    except (OSError, tarfile.TarError):
        return None
    return None if entry is None else str(entry["digest"])


def keep(archive: Path, image_id: str, root: Path | None = None) -> bool:
    """Move `archive` here under `image_id` when it is that image's archive (module doc). Never raises: a full disk
    or an unwritable cache only means the push saves the image from the engine."""
    found = _ID.fullmatch(image_id)
    if found is None or manifest_digest(archive) != image_id:
        return False
    folder = root or held_root()
    target = folder / f"{found.group(1)}.tar"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(archive, target)  # the same filesystem: a rename
        except OSError:
            fd, partial = tempfile.mkstemp(dir=folder, prefix=".partial-")
            os.close(fd)
            try:
                shutil.copyfile(archive, partial)
                os.replace(partial, target)
            finally:
                Path(partial).unlink(missing_ok=True)
        prune(folder, keep_path=target)
    except OSError:
        return False
    return True


def find(image_id: str, root: Path | None = None) -> Path | None:
    """The kept archive of `image_id` (marked as used now), or None."""
    found = _ID.fullmatch(image_id)
    if found is None:
        return None
    path = (root or held_root()) / f"{found.group(1)}.tar"
    try:
        os.utime(path)
    except OSError:
        return None
    return path


def prune(folder: Path, keep_path: Path | None = None) -> None:
    """The least recently used archives beyond the limit removed (never `keep_path`)."""
    entries = []
    for path in folder.glob("*.tar"):
        try:
            stat = path.stat()
        except OSError:
            continue
        entries.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= _limit():
            break
        if path == keep_path:
            continue
        path.unlink(missing_ok=True)
        total -= size
