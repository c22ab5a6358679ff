"""The few files an inventory needs, picked out of tar streams as they go by (nothing is unpacked to disk).

Two kinds of stream: one flattened filesystem (`docker export` of a created, never started container), or an image's
layers in order (registry blobs), where an upper layer's whiteouts (`.wh.NAME`, `.wh..wh..opq`) delete what lower
layers left, as the OCI image spec says.
"""

from __future__ import annotations

import hashlib
import posixpath
import tarfile
from collections.abc import Iterable
from typing import IO, Protocol, cast

from imagebuild import files
from imagebuild.inventory import bundled, dpkg, pydist
from imagebuild.inventory.model import OSRelease

OS_RELEASE = ("etc/os-release", "usr/lib/os-release")
MAX_FILE = 4 << 20  # metadata and status files are far smaller; a bigger one is not what we look for
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


class Readable(Protocol):
    """What a tar stream is read from: a file, an HTTP response, a hashing wrapper."""

    def read(self, n: int = -1, /) -> bytes: ...


class HashingReader:
    """Reads a stream and hashes (and counts) every byte, so a digest is checked without holding the blob."""

    def __init__(self, raw: IO[bytes] | Readable) -> None:
        self.raw, self.sha, self.size = raw, hashlib.sha256(), 0

    def read(self, n: int = -1, /) -> bytes:
        data = self.raw.read(n)
        self.sha.update(data)
        self.size += len(data)
        return data

    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()


def wanted(path: str) -> bool:
    return path in OS_RELEASE or dpkg.wanted(path) or pydist.wanted(path) or bundled.wanted(path)


def clean(name: str) -> str:
    path = posixpath.normpath("/" + name).lstrip("/")
    return "" if path == "." else path


class Collector:
    """Accumulates the wanted files over one or more tar streams, applying layer whiteouts in between."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def add_layer(self, stream: Readable, compression: str = "") -> None:
        """Read one tar stream (compression "", "gz" or "zst") to its end; as a layer over what earlier calls read.
        zstd (OCI `tar+zstd` layers, what `imagebuild push` writes) is read through the zstandard library, every
        frame to the end of the blob (a compressor may write several)."""
        mine: dict[str, bytes] = {}
        gone: list[str] = []  # whited-out paths: everything at or under them from lower layers
        opaque: list[str] = []  # directories whose lower-layer contents are hidden
        links: list[tuple[str, str]] = []  # hard links to wanted files, resolved after the layer
        if compression == "zst":
            import zstandard

            stream = zstandard.ZstdDecompressor().stream_reader(cast(IO[bytes], stream), read_across_frames=True,
                                                                closefd=False)
            compression = ""
        mode = f"r|{compression}" if compression else "r|"
        with tarfile.open(fileobj=cast(IO[bytes], stream), mode=mode) as tar:  # type: ignore[call-overload]
            for member in tar:
                path = clean(member.name)
                if not path:
                    continue
                head, base = posixpath.split(path)
                if base == OPAQUE:
                    opaque.append(head)
                    continue
                if base.startswith(WHITEOUT):
                    gone.append(posixpath.join(head, base[len(WHITEOUT):]))
                    continue
                if not wanted(path):
                    continue
                if member.islnk():
                    links.append((path, clean(member.linkname)))
                elif member.isfile() and member.size <= MAX_FILE:
                    f = tar.extractfile(member)
                    if f is not None:
                        mine[path] = f.read()
            # drain what the tar reader leaves (end-of-archive blocks) so a wrapping hasher sees every byte
            while stream.read(1 << 16):
                pass
        for target in gone:
            self._drop(target, keep_self=False)
        for directory in opaque:
            self._drop(directory, keep_self=True)
        for path, target in links:
            data = mine.get(target, self.files.get(target))
            if data is not None:
                mine[path] = data
        self.files.update(mine)

    def _drop(self, path: str, keep_self: bool) -> None:
        prefix = path + "/" if path else ""
        for existing in [p for p in self.files if p.startswith(prefix) or (not keep_self and p == path)]:
            del self.files[existing]


def collect(streams: Iterable[tuple[Readable, str]]) -> dict[str, bytes]:
    collector = Collector()
    for stream, compression in streams:
        collector.add_layer(stream, compression)
    return collector.files


def os_release(files: dict[str, bytes]) -> OSRelease:
    """/etc/os-release, else /usr/lib/os-release (shell-style KEY=value lines)."""
    for path in OS_RELEASE:
        if path in files:
            values: dict[str, str] = {}
            for line in files[path].decode("utf-8", "replace").splitlines():
                key, sep, value = line.strip().partition("=")
                if sep and not key.startswith("#"):
                    values[key] = value.strip().strip("'\"")
            return OSRelease(
                id=values.get("ID", ""),
                version_id=values.get("VERSION_ID", ""),
                codename=values.get("VERSION_CODENAME", ""),
                id_like=tuple(values.get("ID_LIKE", "").split()),
                pretty_name=values.get("PRETTY_NAME", ""),
            )
    return OSRelease()


def read_chunks(chunks: Iterable[bytes]) -> IO[bytes]:
    """A file object over an iterator of byte chunks (the SDK's `export()` stream), read sequentially."""
    return files.read_chunks(chunks)
