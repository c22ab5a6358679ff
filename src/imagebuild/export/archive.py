"""A docker-archive made of exactly the image that was inspected (and verified): `docker save` is asked for the image
ID, never a name the engine would resolve again (a tag moved between the check and the save, or during a cosign call,
would put another image in the archive), the archive is copied member by member with the name written into it
(manifest.json's RepoTags, index.json's image-name annotations: what `docker load` and Apptainer read), and before
the copy counts, its bytes are checked against the ID:

- every content-addressed member (`blobs/sha256/HEX`, a top-level `HEX.json` config) hashes to its name;
- manifest.json lists one image whose config is in the archive; either that config's digest is the image ID (the
  classic store's ID) and each layer member hashes to the config's `rootfs.diff_ids` in order, or the image ID is a
  manifest in the archive (the containerd store's ID; an index of them is followed one level) naming that config,
  whose layers are the archive's content-addressed members manifest.json lists.

Anything else is an ArchiveError (one line) and the copy is thrown away by the caller.
"""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import re
import tarfile
from collections.abc import Callable, Iterable
from typing import IO, Any

from imagebuild.files import read_chunks
from imagebuild.oci import Reference, ReferenceSyntaxError

_BLOB = re.compile(r"(?:\./)?blobs/sha256/([0-9a-f]{64})")
_CONFIG = re.compile(r"(?:\./)?([0-9a-f]{64})\.json")
_KEEP_BYTES = 4 << 20  # a member this small is kept to be read (manifest.json, index.json, configs, manifests)
_KEEP_TOTAL = 64 << 20
_CHUNK = 1 << 20


class ArchiveError(Exception):
    """The saved archive is not the image asked for (or not a docker-archive); one line."""


def repo_tag(name: str | None) -> str | None:
    """The RepoTags entry for `name` (`REPO:TAG`; a bare name gets :latest); None for an ID or a digest reference,
    which name no tag."""
    if not name or name.startswith("sha256:"):
        return None
    try:
        ref = Reference.parse(name)
    except ReferenceSyntaxError:
        return None
    if ref.digest and not ref.tag:
        return None
    return f"{ref.name}:{ref.tag or 'latest'}"


def _named_manifest(data: bytes, tag: str | None) -> bytes:
    doc = _json(data, "manifest.json")
    if not isinstance(doc, list) or len(doc) != 1 or not isinstance(doc[0], dict):
        raise ArchiveError(f"manifest.json lists {len(doc) if isinstance(doc, list) else 'no'} images, not the one "
                           "image saved")
    if tag is not None:
        doc[0]["RepoTags"] = [tag]
    return json.dumps(doc, separators=(",", ":")).encode()


def _named_index(data: bytes, tag: str | None) -> bytes:
    doc = _json(data, "index.json")
    if tag is None or not isinstance(doc, dict):
        return data
    for entry in doc.get("manifests") or []:
        if isinstance(entry, dict):
            given = entry.get("annotations")
            notes: dict[str, Any] = given if isinstance(given, dict) else {}
            entry["annotations"] = {**notes, "io.containerd.image.name": tag,
                                    "org.opencontainers.image.ref.name": tag.rsplit(":", 1)[1]}
    return json.dumps(doc, separators=(",", ":")).encode()


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise ArchiveError(f"{what}: not JSON") from None


class _Copy:
    """What the copy saw: each member's sha256, the small ones' bytes, the links."""

    def __init__(self) -> None:
        self.sha: dict[str, str] = {}
        self.kept: dict[str, bytes] = {}
        self.links: dict[str, str] = {}
        self._kept_total = 0

    def member(self, name: str, sha: str, data: bytes | None) -> None:
        self.sha[name] = sha
        if data is not None and self._kept_total + len(data) <= _KEEP_TOTAL:
            self.kept[name] = data
            self._kept_total += len(data)

    def resolve(self, name: str) -> str:
        name = posixpath.normpath(name)
        for _ in range(8):
            if name not in self.links:
                return name
            name = posixpath.normpath(posixpath.join(posixpath.dirname(name), self.links[name]))
        return name

    def blob(self, digest: str) -> bytes | None:
        return self.kept.get(f"blobs/sha256/{digest.removeprefix('sha256:')}")


def copy_checked(chunks: Iterable[bytes], out: IO[bytes], image_id: str, name: str | None,
                 on_bytes: Callable[[int], None] = lambda n: None) -> None:
    """The saved archive `chunks` copied to `out` with `name` written into it, then checked to be `image_id`'s
    (module docstring). ArchiveError otherwise; OSError from writing passes through."""
    tag = repo_tag(name)
    seen = _Copy()
    src = read_chunks(chunks, on_bytes, _CHUNK)
    try:
        with tarfile.open(fileobj=src, mode="r|") as tin, \
                tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tout:
            for member in tin:
                path = posixpath.normpath(member.name)
                if path in seen.sha or path in seen.links:
                    raise ArchiveError(f"{path}: twice in the archive")
                if member.issym() or member.islnk():
                    seen.links[path] = member.linkname
                if not member.isreg():
                    tout.addfile(member)
                    continue
                _copy_member(tin, tout, member, path, tag, seen)
    except tarfile.TarError as exc:
        raise ArchiveError(f"not a docker-archive ({exc})") from None
    _check(seen, image_id)


def _copy_member(tin: tarfile.TarFile, tout: tarfile.TarFile, member: tarfile.TarInfo, path: str, tag: str | None,
                 seen: _Copy) -> None:
    fileobj = tin.extractfile(member)
    assert fileobj is not None  # a regular member
    if path in ("manifest.json", "index.json"):
        if member.size > _KEEP_BYTES:
            raise ArchiveError(f"{path}: {member.size} bytes, not a docker-archive's")
        data = fileobj.read()
        seen.member(path, hashlib.sha256(data).hexdigest(), data)
        new = _named_manifest(data, tag) if path == "manifest.json" else _named_index(data, tag)
        named = tarfile.TarInfo(member.name)
        named.mode, named.mtime, named.size = member.mode, member.mtime, len(new)
        tout.addfile(named, io.BytesIO(new))
        return
    sha = hashlib.sha256()
    keep = bytearray() if member.size <= _KEEP_BYTES else None
    hashing = _Hashing(fileobj, sha, keep)
    tout.addfile(member, hashing)
    seen.member(path, sha.hexdigest(), bytes(keep) if keep is not None else None)


class _Hashing(io.RawIOBase):
    def __init__(self, inner: IO[bytes], sha: Any, keep: bytearray | None) -> None:
        self._inner, self._sha, self._keep = inner, sha, keep

    def read(self, n: int = -1) -> bytes:
        data = self._inner.read(n)
        self._sha.update(data)
        if self._keep is not None:
            self._keep += data
        return data


def _check(seen: _Copy, image_id: str) -> None:
    for path, sha in seen.sha.items():
        m = _BLOB.fullmatch(path) or _CONFIG.fullmatch(path)
        if m and m.group(1) != sha:
            raise ArchiveError(f"{path}: its bytes hash to sha256:{sha}, not the digest it is named by")
    if "manifest.json" not in seen.kept:
        raise ArchiveError("no manifest.json: not a docker-archive")
    entry = _json(seen.kept["manifest.json"], "manifest.json")[0]
    config_path = seen.resolve(str(entry.get("Config") or ""))
    layers = [seen.resolve(str(p)) for p in entry.get("Layers") or []]
    if config_path not in seen.kept:
        raise ArchiveError(f"manifest.json names the config {config_path!r}, which the archive lacks")
    config_digest = f"sha256:{seen.sha[config_path]}"
    missing = [p for p in layers if p not in seen.sha]
    if missing:
        raise ArchiveError(f"manifest.json names the layer {missing[0]!r}, which the archive lacks")
    if config_digest == image_id:
        diff_ids = (_json(seen.kept[config_path], config_path).get("rootfs") or {}).get("diff_ids") or []
        got = [f"sha256:{seen.sha[p]}" for p in layers]
        if got != diff_ids:
            raise ArchiveError(f"the archive's layers are not the layers of {image_id[:19]} (its config's diff_ids)")
        return
    manifest = _image_manifest(seen, image_id, config_digest)
    want = [posixpath.normpath(f"blobs/sha256/{str(d.get('digest')).removeprefix('sha256:')}")
            for d in manifest.get("layers") or [] if isinstance(d, dict)]
    if want != layers:
        raise ArchiveError(f"manifest.json's layers are not the layers of the manifest {image_id[:19]}")


def _image_manifest(seen: _Copy, image_id: str, config_digest: str) -> dict[str, Any]:
    """The image manifest `image_id` names in the archive (itself, or one member of the index it is) whose config
    is `config_digest`; ArchiveError when the archive holds another image."""
    other = ArchiveError(f"the saved archive holds the image {config_digest[:19]}, not {image_id[:19]} that was "
                         "inspected and verified")
    data = seen.blob(image_id)
    if data is None:
        raise other
    doc = _json(data, image_id)
    candidates = [doc]
    if isinstance(doc, dict) and isinstance(doc.get("manifests"), list):
        candidates = [_json(b, str(m.get("digest"))) for m in doc["manifests"] if isinstance(m, dict)
                      for b in [seen.blob(str(m.get("digest")))] if b is not None]
    for cand in candidates:
        if isinstance(cand, dict) and (cand.get("config") or {}).get("digest") == config_digest:
            return cand
    raise other
