"""The engine's filesystem tar, unpacked into a directory for mksquashfs, with each entry's owner and mode kept
aside as mksquashfs pseudo definitions (`path m MODE UID GID`).

Why aside: the files' owners and modes must be the image's, whoever runs the export. Unpacked by a non-root user,
every file would belong to that user (and a root export would look up user *names* in the host's passwd), so the
squashfs gets owners and modes from the tar headers through the pseudo file, never from the unpacked copy; the copy
itself is only made readable for mksquashfs. That also makes the output the same for every user who exports.

What is dropped, as enroot drops it: everything under /dev (the runtime mounts its own) and /.dockerenv.
Modes get what enroot's import gives every file (`common::fixperms`): readable by the owner, directories and
executables searchable, directories writable by the owner — so the unprivileged user who unpacks the image on a
node (`enroot create`) can later remove it. Extended attributes are not kept (enroot's `tar -px` drops them too).
"""

from __future__ import annotations

import copy
import io
import os
import stat
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DROPPED_PREFIXES = ("dev/",)
DROPPED_NAMES = (".dockerenv",)


class UnpackError(Exception):
    """A tar member that cannot be represented (the message names it)."""


@dataclass
class Unpacked:
    root: Path
    owners: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # "/path" -> (mode bits, uid, gid)
    members: int = 0
    bytes_read: int = 0


class ChunkReader(io.RawIOBase):
    """A raw stream over an iterator of byte chunks (the engine's export stream), counting what it read; each chunk
    is handed out by offset, never re-sliced, so small tar reads do not copy the rest of a 1 MiB chunk each time."""

    def __init__(self, chunks: Iterable[bytes], on_bytes: Callable[[int], None] | None = None) -> None:
        super().__init__()
        self._chunks: Iterator[bytes] = iter(chunks)
        self._chunk = b""
        self._offset = 0
        self.total = 0
        self._on_bytes = on_bytes

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._offset >= len(self._chunk):
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._chunk, self._offset = chunk, 0
            self.total += len(chunk)
            if self._on_bytes is not None:
                self._on_bytes(self.total)
        view = memoryview(buffer).cast("B")
        n = min(len(view), len(self._chunk) - self._offset)
        view[:n] = self._chunk[self._offset:self._offset + n]
        self._offset += n
        return n


def enroot_mode(mode: int, is_dir: bool) -> int:
    """The permission bits (with setuid/setgid/sticky) enroot's import leaves: u+r, u+x for directories and for
    files anyone may execute, u+w for directories."""
    bits = stat.S_IMODE(mode) | stat.S_IRUSR
    if is_dir or bits & 0o111:
        bits |= stat.S_IXUSR
    if is_dir:
        bits |= stat.S_IWUSR
    return bits


# Python >= 3.12 (and 3.11.4+) filters extraction; the checks are ours (_inside), so the member goes through as is
_TRUSTED: dict[str, Any] = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}


def _within(real_root: str, path: str) -> bool:
    return path == real_root or path.startswith(real_root.rstrip("/") + "/")


def _inside(root: Path, name: str, member: tarfile.TarInfo) -> None:
    """Refuse a member that would land outside `root`: `..` in its name (or a hard link's target), a folder on its
    way (or on its hard link target's way) that an earlier member made a symbolic link out of the tree, or a folder
    member that is such a link itself (tarfile would chmod what it points at)."""
    if ".." in name.split("/") or (member.islnk() and ".." in member.linkname.split("/")):
        raise UnpackError(f"{name!r}: a path with '..' in the image's files")
    real_root = os.path.realpath(root)
    paths = [os.path.dirname(root / name)]
    if member.isdir():
        paths.append(str(root / name))
    if member.islnk():
        paths.append(os.path.dirname(root / member.linkname))
    for path in paths:
        if not _within(real_root, os.path.realpath(path)):
            raise UnpackError(f"{name!r}: would be written outside the image's tree (through a symbolic link)")


def _clear(target: Path, name: str) -> None:
    """Remove what an earlier member left at `target`: a new member is a new file, so a symbolic link there is
    replaced rather than written through, and a hard link's shared inode is never written into. A folder there is
    refused: an engine's export names each path once, and tarfile, failing to make a link over a folder, would fall
    back to extracting the link's target in its place (a link to itself recursed without end)."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise UnpackError(f"{name!r}: a file or link over a folder the image's files already hold")
    os.unlink(target)


def _hard_link(root: Path, member: tarfile.TarInfo) -> None:
    """A hard link to an earlier member, made without following a symbolic link (a link to a link links the link,
    as tar does), never to a file outside the tree (its folders were checked by _inside)."""
    source, target = root / member.linkname, root / member.name
    try:
        st = os.lstat(source)
    except FileNotFoundError:
        raise UnpackError(f"{member.name!r}: a hard link to {member.linkname!r}, which is not in the image") from None
    if stat.S_ISDIR(st.st_mode):
        raise UnpackError(f"{member.name!r}: a hard link to the folder {member.linkname!r}")
    target.parent.mkdir(parents=True, exist_ok=True)
    os.link(source, target, follow_symlinks=False)


def _normalise(name: str) -> str:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return "/".join(parts)


def _dropped(name: str) -> bool:
    return name in DROPPED_NAMES or any(name.startswith(p) for p in DROPPED_PREFIXES)


def unpack(chunks: Iterable[bytes], root: Path, on_bytes: Callable[[int], None] | None = None) -> Unpacked:
    """Unpack the tar stream into `root` (an empty directory); returns the entries' image owners and modes."""
    reader = ChunkReader(chunks, on_bytes)
    out = Unpacked(root=root)
    with tarfile.open(fileobj=io.BufferedReader(reader, buffer_size=1 << 20), mode="r|") as tar:
        for member in tar:
            name = _normalise(member.name)
            if not name or _dropped(name):
                continue
            if "\n" in name:
                raise UnpackError(f"{name!r}: a file name with a newline cannot be packed")
            member.name = name
            if member.islnk():
                member.linkname = _normalise(member.linkname)
            if member.ischr() or member.isblk() or member.isfifo():
                # device nodes outside /dev and FIFOs: mksquashfs packs what it finds; an unprivileged unpack
                # cannot create device nodes, so they are left out like /dev itself
                continue
            _inside(root, name, member)
            if not member.isdir():
                _clear(root / name, name)
            if member.islnk():
                _hard_link(root, member)
            else:
                on_disk = copy.copy(member)
                if not member.issym():
                    on_disk.mode = (0o700 if member.isdir() else 0o600) | (member.mode & 0o111)
                tar.extract(on_disk, str(root), set_attrs=True, numeric_owner=True, **_TRUSTED)
            if not member.islnk():  # a hard link shares its target's inode (and so its owner and mode)
                mode = 0o777 if member.issym() else enroot_mode(member.mode, member.isdir())
                out.owners["/" + name] = (mode, member.uid, member.gid)
            out.members += 1
    out.bytes_read = reader.total
    return out


def add_file(unpacked: Unpacked, relpath: str, text: str, mode: int = 0o644) -> None:
    """Write one file into the unpacked tree (root-owned in the squashfs): enroot's /etc files. A path through a
    symbolic link is refused, so nothing is written outside the tree."""
    target = unpacked.root / relpath
    parent = target.parent
    if parent.is_symlink() or target.is_symlink() or not parent.resolve().is_relative_to(unpacked.root.resolve()):
        raise UnpackError(f"/{relpath}: the image has a symbolic link on that path; cannot write enroot's file")
    parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    os.chmod(target, mode)
    unpacked.owners["/" + relpath] = (mode, 0, 0)


def add_directory(unpacked: Unpacked, path: str) -> None:
    """A directory enroot would create (the WORKDIR when the image lacks it), root-owned, 0755."""
    rel = _normalise(path)
    if not rel:
        return
    target = unpacked.root / rel
    if target.exists() or target.is_symlink():
        return
    if not target.parent.resolve().is_relative_to(unpacked.root.resolve()):
        raise UnpackError(f"/{rel}: the image has a symbolic link on that path; cannot create it")
    target.mkdir(parents=True)
    node = Path(rel)
    for part in [*reversed(node.parents[:-1]), node]:
        unpacked.owners.setdefault("/" + str(part), (0o755, 0, 0))


def _escape(path: str) -> str:
    out = []
    for ch in path:
        if ch in ' "\\\t':
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def pseudo_definitions(unpacked: Unpacked) -> str:
    """The mksquashfs pseudo file: `path m MODE UID GID` for every entry, in path order."""
    lines = [f"{_escape(path)} m {mode:o} {uid} {gid}" for path, (mode, uid, gid) in sorted(unpacked.owners.items())]
    return "\n".join(lines) + "\n"
