"""Packing a root filesystem into a squashfs that every cluster node mounts, and telling a whole one from a damaged
one.

Compression: gzip (zlib), squashfs's default. It is the one compressor every kernel with squashfs mounts
(CONFIG_SQUASHFS_ZLIB is on in every distribution kernel, and squashfuse always has it); xz, lzo, lz4 and zstd are
separate kernel options that some cluster kernels lack, and an image packed with one of those fails on exactly
those nodes ("unknown compression", NVIDIA/enroot issue 6). `none` packs uncompressed (what pyxis' example config
does: larger file, nothing to decompress at start), for nodes that unpack images anyway.

Reproducible: the same root filesystem and owners give the same bytes: every timestamp (files and the superblock)
is the image's source date, no extended attributes, owners and modes from the pseudo file (not from who unpacked it),
and no append to an existing file. mksquashfs sorts each directory itself and writes its parallel compressors'
output in order.

Checked (`export --check`, `verify`): the file is a regular file (a FIFO or a device is refused, never opened: it
could block), the superblock (magic, version 4.0) and its `bytes_used` against the file size (a truncated copy is
shorter than the filesystem it describes); the compressor is one a kernel mounts (gzip everywhere; xz, lzo, lz4 and
zstd only where the nodes' kernel has that CONFIG_SQUASHFS_* option, which the verdict names; lzma and unknown ids
are refused, as the kernel refuses them); then `unsquashfs -s` (superblock) and `unsquashfs -n -pf /dev/null`, which
writes a pseudo file of the whole filesystem *with every file's data* to /dev/null: every inode, directory, fragment
and data block is read and decompressed, nothing is written to disk (listing with -l reads no data block, so a
damaged data block passed). Squashfs has no checksums: a damaged block that still decompresses is caught only by the
sha256 sidecar written at export time, which must be a regular file holding the 64-hex sha256 of the file (an empty
or malformed sidecar is an error, never "verified").
"""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

COMPRESSIONS = ("gzip", "none")
MAGIC = 0x73717368  # "hsqs" little-endian
SUPERBLOCK_SIZE = 96
COMPRESSORS = {1: "gzip", 2: "lzma", 3: "lzo", 4: "xz", 5: "lz4", 6: "zstd"}
NO_TOOLS_HINT = "install squashfs-tools (scripts/system-deps.sh; Debian: apt-get install squashfs-tools)"


class SquashfsError(Exception):
    """mksquashfs / unsquashfs failed or is missing (one line)."""


@dataclass(frozen=True)
class Superblock:
    inodes: int
    mkfs_time: int
    block_size: int
    compressor: str
    flags: int
    version: tuple[int, int]
    bytes_used: int


def tool(name: str) -> str:
    found = shutil.which(name) or next((p for p in (f"/usr/bin/{name}", f"/usr/sbin/{name}") if os.path.exists(p)),
                                       None)
    if not found:
        raise SquashfsError(f"{name} not found: {NO_TOOLS_HINT}")
    return found


def mksquashfs_args(source: Path, dest: Path, pseudo: Path, epoch: int, compression: str,
                    progress: bool, processors: int | None = None) -> list[str]:
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression {compression!r}: valid choices: {', '.join(COMPRESSIONS)}")
    args = [tool("mksquashfs"), str(source), str(dest), "-noappend", "-no-xattrs",
            "-all-time", str(epoch), "-mkfs-time", str(epoch),
            "-root-mode", "755", "-root-uid", "0", "-root-gid", "0", "-pf", str(pseudo)]
    if processors:
        args += ["-processors", str(processors)]
    if compression == "none":
        args += ["-noI", "-noD", "-noF", "-noX"]
    else:
        args += ["-comp", compression]
    if not progress:
        args.append("-no-progress")
    return args


def pack(source: Path, dest: Path, pseudo: Path, epoch: int, compression: str, progress: bool) -> None:
    """Run mksquashfs (its progress bar on our stderr when `progress`); SquashfsError with its last line."""
    args = mksquashfs_args(source, dest, pseudo, epoch, compression, progress)
    proc = subprocess.run(args, stdout=subprocess.DEVNULL if not progress else None, stderr=subprocess.PIPE,
                          text=True, errors="replace", check=False)
    if proc.returncode != 0:
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        raise SquashfsError(f"mksquashfs failed (exit {proc.returncode}): {lines[-1] if lines else 'no message'}")


def read_superblock(data: bytes) -> Superblock | None:
    """The squashfs 4 superblock at the start of `data`, None when it is not one."""
    if len(data) < SUPERBLOCK_SIZE:
        return None
    magic, inodes, mkfs_time, block_size, _frags, comp, _log, flags, _ids, major, minor = struct.unpack_from(
        "<IIIIIHHHHHH", data, 0)
    if magic != MAGIC:
        return None
    (bytes_used,) = struct.unpack_from("<Q", data, 40)
    return Superblock(inodes=inodes, mkfs_time=mkfs_time, block_size=block_size,
                      compressor=COMPRESSORS.get(comp, f"unknown ({comp})"), flags=flags, version=(major, minor),
                      bytes_used=bytes_used)


def sidecar(path: Path) -> Path:
    """`FILE.sha256` beside an export: `sha256sum -c` reads it."""
    return path.with_name(path.name + ".sha256")


KERNEL_OPTIONS = {"gzip": "CONFIG_SQUASHFS_ZLIB", "xz": "CONFIG_SQUASHFS_XZ", "lzo": "CONFIG_SQUASHFS_LZO",
                  "lz4": "CONFIG_SQUASHFS_LZ4", "zstd": "CONFIG_SQUASHFS_ZSTD"}
# -n: no progress bar; -da/-fr: 32 MB data and fragment queues instead of 256 MB each (measured on a 224 MB .sqsh of
# /usr/share, 668 MB unpacked: 83 MB resident instead of 471 MB, 4.4-8.0 s against 6.7-12.9 s with the defaults on
# this 2-core machine; extracting it for real with -d took 27.8 s and 668 MB of disk; -l 0.4 s)
READ_EVERY_BLOCK = ["-n", "-da", "32", "-fr", "32", "-pf", os.devnull]
SIDECAR_MAX_BYTES = 4096  # "<64 hex>  <name>\n": anything longer was not written by export
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass
class Verdict:
    """What `verify` found: `problems` (empty: whole), the compressor and the kernel option the nodes need, and
    whether a sidecar's sha256 was compared (and matched)."""

    problems: list[str]
    compressor: str | None = None
    kernel_option: str | None = None
    sha256_verified: bool = False


def check(path: Path, sha256_of: Callable[[Path], str] | None = None) -> list[str]:
    """Problems with a .sqsh file (empty: whole); see `verify`."""
    return verify(path, sha256_of).problems


def _unsquashfs(path: Path, args: list[str], what: str) -> str | None:
    proc = subprocess.run([tool("unsquashfs"), *args, str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, text=True, errors="replace", check=False)
    if proc.returncode == 0:
        return None
    last = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    return (f"{path}: unsquashfs {' '.join(args)} ({what}) failed (exit {proc.returncode})"
            + (f": {last[-1]}" if last else ""))


def verify(path: Path, sha256_of: Callable[[Path], str] | None = None) -> Verdict:
    """Can `path` be mounted and unpacked, and is it the file export wrote? `sha256_of(path) -> hex` computes the
    digest for the sidecar (without it the sidecar is not read)."""
    try:
        with _open_regular(path, "not a squashfs file") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(SUPERBLOCK_SIZE)
    except _NotRegular as exc:
        return Verdict([str(exc)])
    except OSError as exc:
        return Verdict([f"{path}: cannot read: {exc.strerror or exc}"])
    sb = read_superblock(head)
    if sb is None:
        return Verdict([f"{path}: not a squashfs (no squashfs superblock at the start; {size} bytes)"])
    verdict = Verdict([], compressor=sb.compressor, kernel_option=KERNEL_OPTIONS.get(sb.compressor))
    problems = verdict.problems
    if sb.version != (4, 0):
        problems.append(f"{path}: squashfs version {sb.version[0]}.{sb.version[1]}, kernels mount 4.0")
    if sb.bytes_used > size:
        problems.append(f"{path}: truncated: the superblock says {sb.bytes_used} bytes, the file has {size}")
        return verdict
    if verdict.kernel_option is None:  # the kernel reads the id at mount, whatever the flags say
        problems.append(f"{path}: compressed with {sb.compressor}, which no kernel's squashfs mounts (it knows "
                        f"{', '.join(KERNEL_OPTIONS)}); export again (imagebuild export uses gzip)")
        return verdict
    for args, what in ((["-s"], "superblock"), (READ_EVERY_BLOCK, "every inode, directory and data block")):
        failed = _unsquashfs(path, args, what)
        if failed:
            problems.append(failed)
            break
    if sha256_of is not None:
        _check_sidecar(path, sha256_of, verdict)
    return verdict


class _NotRegular(Exception):
    pass


def _open_regular(path: Path, what_not: str) -> io.BufferedReader:
    """`path` opened for reading only when it is a regular file (or a link to one): opened non-blocking and checked
    with fstat before a byte is read, so a FIFO, a device or a folder is refused at once, never waited on."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _NotRegular(f"{path}: {_kind(st.st_mode)}, {what_not}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _check_sidecar(path: Path, sha256_of: Callable[[Path], str], verdict: Verdict) -> None:
    """Compare the sidecar's sha256 with the file's; a sidecar that is not a regular file is refused before it is
    opened (a FIFO would block the check), an empty or malformed one is a problem, never a pass."""
    side = sidecar(path)
    if not os.path.lexists(side):
        return
    try:
        with _open_regular(side, "not a sha256 file; nothing was verified against it") as f:
            data = f.read(SIDECAR_MAX_BYTES + 1)
    except _NotRegular as exc:
        verdict.problems.append(str(exc))
        return
    except OSError as exc:
        verdict.problems.append(f"{side}: cannot read: {exc.strerror or exc}")
        return
    words = data.decode("utf-8", "replace").split()
    if len(data) > SIDECAR_MAX_BYTES or not words or not _SHA256_HEX.fullmatch(words[0].lower()):
        shown = "empty" if not words else f"starts {words[0][:20]!r}" if len(data) <= SIDECAR_MAX_BYTES else \
            f"larger than {SIDECAR_MAX_BYTES} bytes"
        verdict.problems.append(f"{side}: holds no sha256 ({shown}; expected 64 hex digits, as `sha256sum` "
                                f"writes); {path.name} was not verified")
        return
    want, got = words[0].lower(), sha256_of(path)
    if want != got:
        verdict.problems.append(f"{path}: sha256 {got} differs from {side.name} ({want}): the file changed or is "
                                "damaged")
        return
    verdict.sha256_verified = True
