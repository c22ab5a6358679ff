"""The images a BuildKit build exported and the engine loaded, kept in one OCI layout beside the engine under the
image IDs they became, so that a push sends the bytes from where they already are (issue 44: no `docker save` of the
image again, nothing compressed again) and a rebuild exports and loads only the blobs that are new.

The BuildKit backend on the containerd image store exports each image (zstd layers, OCI media types:
builder/backends/buildkit/argv.py) as `type=oci,tar=false` into the layout `oci/` here. BuildKit's content writer
skips a blob the layout already holds (measured on dockerd 26.1.5 + buildx 0.13.1: a 300 MB layer's second export
0.3 s, its docker archive 4.5 s), so an image standing on one built before sends only its own new blobs. The
backend then loads an archive of what the engine lacks (`load_archive`) and, once loaded, `keep`s the image: a file
`<hex of the ID>.json`, an index naming exactly that manifest (the containerd store's image ID is the manifest
digest). `find` gives it back to the push and the SBOM's layer-by-layer read, which open it with `open_image` as they
open a `docker save` archive and still check every byte against the ID (push/asheld.py: the manifest hashes to it,
each blob to its descriptor) and fall back to the engine's save when it is absent, damaged or another image's.

Kept images are a cache: after a build, the least recently used beyond `IMAGEBUILD_HELD_MAX` bytes (default 10 GiB,
counted over the blobs they reference) are forgotten and the blobs no kept image references are removed, but only
while no build is exporting into the layout (`exporting()`: a shared lock each build holds, the prune's exclusive
one is only tried).

Reading an archive's or the layout's blobs (`blobs/sha256/<hex>`), every byte checked against the digest it is
read by, is here too (`blob_member`, `read_blob`, `copy_blob`): the push (push/asheld.py) and the SBOM's layer-by-layer
read (inventory/layered.py) both read kept images.

Where: `$IMAGEBUILD_LAYER_CACHE/held`, else `$XDG_CACHE_HOME/imagebuild/layers/held` (`~/.cache/…`): beside the
push's compressed-layer cache (push/compress.py), whose root is this module's `cache_root`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import IO, Any, Protocol

DEFAULT_HELD_MAX = 10 << 30
_ID = re.compile(r"sha256:([0-9a-f]{64})")
_CHUNK = 1 << 20
LAYOUT = "oci"  # the OCI layout under the held folder that BuildKit exports into
_BLOB_NAME = re.compile(r"blobs/sha256/[0-9a-f]{64}")
INDEX_MEDIA = "application/vnd.oci.image.index.v1+json"


class BlobSource(Protocol):
    """What the blob readers ask of an image's files: a `docker save` archive (tarfile.TarFile) or a kept image of
    the layout (LayoutImage)."""

    def getmember(self, name: str) -> tarfile.TarInfo: ...

    def extractfile(self, member: str | tarfile.TarInfo) -> IO[bytes] | None: ...


class BlobProblem(ValueError):
    """An OCI archive's blob is missing, is no file, is too large, or holds other bytes than its digest."""


def cache_root() -> Path:
    """The root of imagebuild's caches of image bytes: the compressed layers and the kept images."""
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


def index_entry(tar: BlobSource) -> dict[str, Any] | None:
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


def blob_member(tar: BlobSource, digest: str) -> tarfile.TarInfo:
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


def read_blob(tar: BlobSource, digest: str, limit: int, size: int | None = None) -> bytes:
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


def copy_blob(tar: BlobSource, digest: str, size: int, target: Path) -> None:
    """Blob `digest` to `target`, hashed as it is copied: BlobProblem (and no `target`) when it holds other bytes than
    its descriptor (`digest`, `size`) says. A kept image's blob on the same file system is linked, not copied, and
    hashed where it is (its file is written once, under its digest, and never changed in place: a blob of other
    bytes is refused here, and skopeo checks every blob it sends against its digest again as it reads it)."""
    member = blob_member(tar, digest)
    hasher, written = hashlib.sha256(), 0
    partial = target.with_name(target.name + ".partial")
    try:
        if isinstance(tar, LayoutImage) and _linked(tar.file_of(member.name), partial):
            opened: IO[bytes] = partial.open("rb")
            out: IO[bytes] | None = None
        else:
            fh = tar.extractfile(member)
            assert fh is not None  # (a file: blob_member)
            opened, out = fh, partial.open("wb")
        with opened, out or contextlib.nullcontext():
            while chunk := opened.read(_CHUNK):
                hasher.update(chunk)
                written += len(chunk)
                if out is not None:
                    out.write(chunk)
        if "sha256:" + hasher.hexdigest() != digest or written != size:
            raise BlobProblem(f"the blob {digest} holds other bytes (sha256:{hasher.hexdigest()}, {written} bytes; "
                              f"its descriptor says {size})")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


def _linked(source: Path, target: Path) -> bool:
    """`target` made a hard link to `source`; False where the file system will not (another one, no permission)."""
    try:
        os.link(source, target)
    except OSError:
        return False
    return True


# -- the layout the builds export into, and the images kept in it ---------------------------------------------------
def layout_root(root: Path | None = None) -> Path:
    return (root or held_root()) / LAYOUT


def blob_path(layout: Path, digest: str) -> Path:
    """Where the layout holds blob `digest` (`sha256:<hex>`)."""
    return layout / "blobs" / "sha256" / digest.removeprefix("sha256:")


def layout_blobs(layout: Path) -> set[str]:
    """The digests of the blobs the layout holds now."""
    try:
        return {"sha256:" + p.name for p in (layout / "blobs" / "sha256").iterdir() if _ID.fullmatch("sha256:" + p.name)}
    except OSError:
        return set()


class LayoutImage:
    """One kept image of the layout, read as an archive is read: its `index.json` is the kept index file, a
    `blobs/sha256/<hex>` the layout's blob (no other name is answered: a digest read from a manifest never walks out
    of the layout)."""

    def __init__(self, index: Path, layout: Path) -> None:
        self.index, self.layout = index, layout

    def __enter__(self) -> LayoutImage:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _path(self, name: str) -> Path:
        if name == "index.json":
            return self.index
        if _BLOB_NAME.fullmatch(name):
            return self.layout / name
        raise KeyError(name)

    def getmember(self, name: str) -> tarfile.TarInfo:
        try:
            st = self._path(name).stat()
        except OSError:
            raise KeyError(name) from None
        info = tarfile.TarInfo(name)
        info.size = st.st_size
        info.type = tarfile.REGTYPE if os.path.isfile(self._path(name)) else tarfile.DIRTYPE
        return info

    def extractfile(self, member: str | tarfile.TarInfo) -> IO[bytes] | None:
        name = member if isinstance(member, str) else member.name
        return self._path(name).open("rb")

    def file_of(self, name: str) -> Path:
        """The file that holds member `name` (KeyError for any name but the index and a blob)."""
        return self._path(name)


def open_image(path: Path) -> contextlib.AbstractContextManager[BlobSource]:
    """A kept image (`<hex>.json`: LayoutImage) or any docker archive (tarfile), to read its blobs."""
    if path.suffix == ".json":
        return LayoutImage(path, path.parent / LAYOUT)
    return tarfile.open(path)


@contextlib.contextmanager
def exporting(root: Path | None = None) -> Iterator[Path]:
    """The layout, held with a shared lock while a build exports into it and keeps what it loaded: a prune then
    removes none of its blobs (`prune` only tries the exclusive lock). Yields the layout folder."""
    folder = root or held_root()
    layout = layout_root(folder)
    layout.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            yield layout
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _write_atomic(target: Path, data: bytes) -> None:
    fd, partial = tempfile.mkstemp(dir=target.parent, prefix=".partial-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(partial, target)
    finally:
        Path(partial).unlink(missing_ok=True)


def add_blob(layout: Path, data: bytes) -> str:
    """`data` as a blob of the layout (named by its digest, written whole or not at all); its digest."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    target = blob_path(layout, digest)
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(target, data)
    return digest


def manifest_of(layout: Path, digest: str) -> dict[str, Any]:
    """The manifest `digest` of the layout, its bytes checked against the digest; BlobProblem otherwise."""
    with LayoutImage(layout / "index.json", layout) as image:
        raw = read_blob(image, digest, 4 << 20)
    try:
        doc = json.loads(raw)
    except ValueError:
        raise BlobProblem(f"the manifest {digest} is not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict) or not isinstance(doc.get("layers"), list):
        raise BlobProblem(f"the manifest {digest} is no image manifest")
    return doc


def _children(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in (doc["config"], *doc["layers"]) if isinstance(d, dict) and isinstance(d.get("digest"), str)]


def load_archive(layout: Path, descriptor: dict[str, Any], name: str | None, target: Path,
                 leave_out: Collection[str] = ()) -> None:
    """An archive `docker image load` takes for the manifest `descriptor` of the layout: the image's index (named
    `name`, a fully qualified reference; None: unnamed), its manifest, config and every layer but those in
    `leave_out` (what the engine already holds: it takes them from its own store; a load that lacks one fails and
    changes nothing).
    BlobProblem when the layout lacks a blob the archive needs."""
    digest = str(descriptor["digest"])
    doc = manifest_of(layout, digest)
    entry: dict[str, Any] = {"mediaType": descriptor["mediaType"], "digest": digest, "size": descriptor["size"]}
    if name:
        entry["annotations"] = {"io.containerd.image.name": name,
                                "org.opencontainers.image.ref.name": name.rpartition(":")[2]}
    if isinstance(descriptor.get("platform"), dict):
        entry["platform"] = descriptor["platform"]
    index = {"schemaVersion": 2, "mediaType": INDEX_MEDIA, "manifests": [entry]}
    wanted = [digest] + [str(d["digest"]) for d in _children(doc)
                         if d is doc["config"] or str(d["digest"]) not in leave_out]
    with tarfile.open(target, "w") as tar:
        for name, data in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", json.dumps(index).encode())):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o444
            tar.addfile(info, io.BytesIO(data))
        for d in dict.fromkeys(wanted):
            path = blob_path(layout, d)
            if not _ID.fullmatch(d) or not path.is_file():
                raise BlobProblem(f"the layout lacks {d}")
            tar.add(path, arcname=f"blobs/sha256/{d[7:]}")


def keep(image_id: str, root: Path | None = None) -> bool:
    """Keep `image_id` (a manifest digest) of the layout: its index file written, once its manifest hashes to the ID
    and the layout holds its config and every layer. Never raises: a full disk or an unwritable cache only means the
    push saves the image from the engine."""
    found = _ID.fullmatch(image_id)
    folder = root or held_root()
    layout = layout_root(folder)
    if found is None:
        return False
    try:
        doc = manifest_of(layout, image_id)
        size = blob_path(layout, image_id).stat().st_size
        blobs = [blob_path(layout, str(d["digest"])) for d in _children(doc)]
        if len(blobs) != 1 + len(doc["layers"]) or not all(b.is_file() for b in blobs):
            return False
        index = {"schemaVersion": 2, "mediaType": INDEX_MEDIA,
                 "manifests": [{"mediaType": doc.get("mediaType", ""), "digest": image_id, "size": size}]}
        _write_atomic(folder / f"{found.group(1)}.json", json.dumps(index).encode())
    except (OSError, BlobProblem):
        return False
    return True


def find(image_id: str, root: Path | None = None) -> Path | None:
    """The kept index of `image_id` (marked as used now; open it with `open_image`), or None."""
    found = _ID.fullmatch(image_id)
    if found is None:
        return None
    path = (root or held_root()) / f"{found.group(1)}.json"
    try:
        os.utime(path)
    except OSError:
        return None
    return path


def prune(root: Path | None = None, keep_path: Path | None = None) -> None:
    """The least recently used kept images beyond the limit forgotten (never `keep_path`), then the layout's blobs
    no kept image references removed, with the layout's own index; only when no build holds the layout
    (`exporting`), else nothing is removed this time. Never raises."""
    folder = root or held_root()
    layout = layout_root(folder)
    try:
        with (folder / ".lock").open("a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return  # a build is exporting: its blobs are not referenced yet
            try:
                _prune(folder, layout, keep_path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
    except OSError:
        return


def _prune(folder: Path, layout: Path, keep_path: Path | None) -> None:
    for legacy in folder.glob("*.tar"):  # an earlier version's whole archives
        legacy.unlink(missing_ok=True)
    kept: list[tuple[float, Path, set[str]]] = []
    for path in folder.glob("*.json"):
        try:
            mtime = path.stat().st_mtime
            doc = manifest_of(layout, "sha256:" + path.stem)
        except (OSError, BlobProblem):
            path.unlink(missing_ok=True)
            continue
        kept.append((mtime, path, {"sha256:" + path.stem, *(str(d["digest"]) for d in _children(doc))}))
    sizes = {d: _size(layout, d) for _, _, blobs in kept for d in blobs}

    def total() -> int:
        return sum(sizes[d] for d in set().union(*(b for _, _, b in kept)))

    for entry in sorted(kept, key=lambda e: e[0]):
        if total() <= _limit():
            break
        if entry[1] != keep_path:
            entry[1].unlink(missing_ok=True)
            kept.remove(entry)
    referenced: set[str] = set().union(*(b for _, _, b in kept))
    for digest in layout_blobs(layout) - referenced:
        blob_path(layout, digest).unlink(missing_ok=True)
    (layout / "index.json").unlink(missing_ok=True)  # BuildKit's own list of every export: written again by the next


def _size(layout: Path, digest: str) -> int:
    try:
        return blob_path(layout, digest).stat().st_size
    except OSError:
        return 0
