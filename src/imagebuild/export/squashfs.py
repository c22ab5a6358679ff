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

Checked (`export --check`): the superblock (magic, version 4.0, the compressor) and its `bytes_used` against the file
size (a truncated copy is shorter than the filesystem it describes), then `unsquashfs -s` (superblock) and
`unsquashfs -l` (reads every inode and directory table; damage there makes it fail), and the sha256 written beside
the file at export time when it is there.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
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


def check(path: Path, sha256_of: object = None) -> list[str]:
    """Problems with a .sqsh file (empty: whole). `sha256_of(path) -> hex` computes the digest for the sidecar."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(SUPERBLOCK_SIZE)
    except OSError as exc:
        return [f"{path}: cannot read: {exc.strerror or exc}"]
    sb = read_superblock(head)
    if sb is None:
        return [f"{path}: not a squashfs (no squashfs superblock at the start; {size} bytes)"]
    problems = []
    if sb.version != (4, 0):
        problems.append(f"{path}: squashfs version {sb.version[0]}.{sb.version[1]}, kernels mount 4.0")
    if sb.bytes_used > size:
        problems.append(f"{path}: truncated: the superblock says {sb.bytes_used} bytes, the file has {size}")
    if sb.compressor not in ("gzip",) and not (sb.flags & 0x0002):  # bit 1: data uncompressed
        problems.append(f"{path}: compressed with {sb.compressor}: kernels without CONFIG_SQUASHFS_"
                        f"{sb.compressor.upper()} cannot mount it (gzip is mounted everywhere)")
    if problems and any("truncated" in p for p in problems):
        return problems
    unsquashfs = tool("unsquashfs")
    for flag, what in (("-s", "superblock"), ("-l", "inode and directory tables")):
        proc = subprocess.run([unsquashfs, flag, str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, errors="replace", check=False)
        if proc.returncode != 0:
            last = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
            problems.append(f"{path}: unsquashfs {flag} ({what}) failed (exit {proc.returncode})"
                            + (f": {last[-1]}" if last else ""))
            break
    side = sidecar(path)
    if callable(sha256_of) and side.exists():
        want = side.read_text(encoding="utf-8", errors="replace").split()[:1]
        got = sha256_of(path)
        if want and want[0] != got:
            problems.append(f"{path}: sha256 {got} differs from {side.name} ({want[0]}): the file changed or is "
                            "damaged")
    return problems
