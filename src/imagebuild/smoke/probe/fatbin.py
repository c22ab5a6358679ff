"""Which GPU code a CUDA ELF carries, read from its `.nv_fatbin` section: the SASS architectures (cubins) and the
PTX it embeds, standard library only, headers only (a compressed entry is skipped over, never decompressed), so it
runs inside images (the probe's coverage section) and on a CPU build host (`imagebuild coverage`).

The section holds fatbin containers one after another (8-byte aligned): a 16-byte header (magic 0xBA55ED50, version
1, header size, size of the entries that follow), then entries, each a header of its own size followed by its
payload. Per entry: kind (1 PTX, 2 ELF; 0x10 another ELF kind), the code version (for PTX the ISA version: 8.8), the
architecture number (90) and flags: 0x100000 arch-specific (sm_90a, runs only on sm_90), 0x200000 family-specific
(sm_100f, runs on the sm_10x family). `cuobjdump --list-elf/--list-ptx` names the same entries (it shows family code
as plain sm_100); tests/unit/test_fatbin_real.py proves the two agree on NVIDIA's own wheels.

Not all of a library's GPU code is in `.nv_fatbin`. cuFFT for CUDA 13 (nvidia-cufft 12.0.0.61, libcufft.so.12) keeps
an empty device-link image for sm_75 there and loads its ~24,000 real containers (SASS sm_75..sm_120, PTX, LTO IR)
from its large-data section `.ldata`; cuobjdump lists only the former. So the containers in a library's data
sections (EMBEDDED_SECTIONS) count too, each kept only when it parses exactly (a magic number in data by chance is
skipped), and an uncompressed cubin without one `.text.` section (no kernel: libcufftw's only entry) counts as no
code for its architecture (`empty_elf_entries`). A compressed cubin is counted as code (it is never decompressed).
"""

from __future__ import annotations

import os
import struct

MAGIC = 0xBA55ED50
MAGIC_BYTES = struct.pack("<I", MAGIC)
KIND_PTX, KIND_ELF, KIND_ELF_ALT = 1, 2, 0x10
FLAG_ARCH_SPECIFIC, FLAG_FAMILY = 0x100000, 0x200000
FLAG_COMPRESSED = 0x2000 | 0x8000  # either compression NVIDIA's tools write (seen: 0x2011, 0x8011, 0x1008011)
KIND_IR = 8  # LTO IR (nvJitLink links it at run time): neither SASS nor PTX
# sections whose bytes may hold fatbin containers a library loads itself (module doc); NOBITS ones have no bytes
EMBEDDED_SECTIONS = (".data", ".ldata", ".rodata", ".lrodata", ".data.rel.ro")
SHT_NOBITS = 8
_CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
_ENTRY = struct.Struct("<HHIQIIHHIIIQ")  # kind, -, header size, payload size, -, -, minor, major, arch, -, -, flags
SCAN = 1 << 16  # bytes read at a time when looking for the next container after padding


class FatbinError(ValueError):
    """A `.nv_fatbin` section that does not parse (truncated, an entry running past its container)."""


def elf_sections(path: str) -> dict[str, tuple[int, int]]:
    """{section name: (file offset, size)} of an ELF file's sections with bytes in it ({} when it is not ELF or has
    no section headers)."""
    try:
        with open(path, "rb") as fh:
            ident = fh.read(64)
            if len(ident) < 52 or ident[:4] != b"\x7fELF":
                return {}
            order = "<" if ident[5] == 1 else ">"
            if ident[4] == 2:
                shoff, = struct.unpack(order + "Q", ident[40:48])
                shentsize, shnum, shstrndx = struct.unpack(order + "HHH", ident[58:64])
                fmt = order + "IIQQQQ"  # name, type, flags, addr, offset, size
            else:
                shoff, = struct.unpack(order + "I", ident[32:36])
                shentsize, shnum, shstrndx = struct.unpack(order + "HHH", ident[46:52])
                fmt = order + "IIIIII"
            if not shoff or not shnum or shstrndx >= shnum:
                return {}
            fh.seek(shoff)
            table = fh.read(shentsize * shnum)
            rows = [struct.unpack_from(fmt, table, i * shentsize) for i in range(shnum)]
            fh.seek(rows[shstrndx][4])
            names = fh.read(rows[shstrndx][5])
    except (OSError, struct.error):
        return {}
    out = {}
    for name_off, kind, _flags, _addr, off, size in rows:
        if kind == SHT_NOBITS:  # (.bss, .lbss: no bytes in the file where their offset points)
            continue
        end = names.find(b"\0", name_off)
        out[names[name_off:end if end >= 0 else None].decode(errors="replace")] = (off, size)
    return out


def arch_name(kind: int, arch: int, flags: int) -> str:
    """sm_90 / sm_90a / sm_100f for SASS, compute_90 / compute_90a for PTX."""
    suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
    return f"{'compute' if kind == KIND_PTX else 'sm'}_{arch}{suffix}"


def fatbin_entries(fd: int, start: int, size: int) -> list[tuple[int, int, int, int, int]]:
    """[(kind, arch, flags, major, minor)] of every entry of the containers in the `size` bytes at `start` of the
    open file `fd` (read with pread: libtorch_cuda.so is over a gigabyte). FatbinError when they do not parse."""
    out = []
    pos, end = start, start + size
    while pos + _CONTAINER.size <= end:
        head = os.pread(fd, _CONTAINER.size, pos)
        magic, _version, header_size, fat_size = _CONTAINER.unpack(head)
        if magic != MAGIC:  # padding between containers: find the next header
            found = _next_magic(fd, pos, end)
            if found is None:
                break
            pos = found
            continue
        entry, stop = pos + header_size, pos + header_size + fat_size
        if header_size < _CONTAINER.size or stop > end:
            raise FatbinError(f"a fatbin container at offset {pos} runs past its section (header {header_size} "
                              f"bytes, ends at {stop}, the section at {end})")
        while entry + _ENTRY.size <= stop:
            fields = _ENTRY.unpack(os.pread(fd, _ENTRY.size, entry))
            kind, entry_header, payload = fields[0], fields[2], fields[3]
            if entry_header < _ENTRY.size or entry + entry_header + payload > stop:
                raise FatbinError(f"a fatbin entry at offset {entry} runs past its container")
            out.append((kind, fields[8], _empty_mark(fd, kind, fields[11], entry + entry_header, payload), fields[7],
                        fields[6]))
            entry += entry_header + payload
        pos = stop
    return out


def embedded_entries(fd: int, start: int, size: int) -> list[tuple[int, int, int, int, int]]:
    """fatbin_entries of the containers in a data section (module doc): only those that parse exactly (version 1, a
    16-byte header, entries that fill the container to its end); anything else is skipped, never an error."""
    out: list = []
    pos, end = start, start + size
    while pos + _CONTAINER.size <= end:
        found = _next_magic(fd, pos, end)
        if found is None:
            break
        _magic, version, header_size, fat_size = _CONTAINER.unpack(os.pread(fd, _CONTAINER.size, found))
        stop = found + header_size + fat_size
        entries = _exact_entries(fd, found + header_size, stop) if (
            version == 1 and header_size == _CONTAINER.size and 0 < fat_size and stop <= end) else None
        if entries is None:
            pos = found + 8
            continue
        out += entries
        pos = stop
    return out


def _exact_entries(fd: int, entry: int, stop: int) -> list | None:
    out = []
    while entry < stop:
        if entry + _ENTRY.size > stop:
            return None
        fields = _ENTRY.unpack(os.pread(fd, _ENTRY.size, entry))
        kind, entry_header, payload = fields[0], fields[2], fields[3]
        if kind not in (KIND_PTX, KIND_ELF, KIND_ELF_ALT, KIND_IR) or entry_header < _ENTRY.size or \
                entry + entry_header + payload > stop:
            return None
        out.append((kind, fields[8], _empty_mark(fd, kind, fields[11], entry + entry_header, payload), fields[7],
                    fields[6]))
        entry += entry_header + payload
    return out


EMPTY = 1 << 63  # a mark in an entry's flags: an uncompressed cubin without a kernel (never a flag NVIDIA writes)


def _empty_mark(fd: int, kind: int, flags: int, payload_at: int, payload: int) -> int:
    """`flags`, with EMPTY set when the entry is an uncompressed cubin whose ELF has no `.text.` section."""
    if kind not in (KIND_ELF, KIND_ELF_ALT) or flags & FLAG_COMPRESSED or payload < 64:
        return flags
    head = os.pread(fd, 64, payload_at)
    if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return flags
    shoff, = struct.unpack_from("<Q", head, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 58)
    if not shnum or shstrndx >= shnum or shentsize < 64 or shoff + shentsize * shnum > payload:
        return flags
    table = os.pread(fd, shentsize * shnum, payload_at + shoff)
    names_off, names_size = struct.unpack_from("<QQ", table, shstrndx * shentsize + 24)
    if names_off + names_size > payload:
        return flags
    names = os.pread(fd, min(names_size, 1 << 20), payload_at + names_off)
    return flags if b"\0.text." in b"\0" + names else flags | EMPTY


def _next_magic(fd: int, pos: int, end: int) -> int | None:
    """The offset of the next container magic at or after `pos` (8-byte aligned), or None before `end`."""
    step = 256  # padding is a few bytes: look close first, then in bigger reads
    while pos < end:
        chunk = os.pread(fd, min(step, end - pos), pos)
        if not chunk:
            return None
        i = chunk.find(MAGIC_BYTES)
        while i >= 0 and (pos + i) % 8:
            i = chunk.find(MAGIC_BYTES, i + 1)
        if i >= 0:
            return pos + i
        pos += max(len(chunk) - 3, 1)
        step = SCAN
    return None


def read_fatbin(path: str) -> dict | None:
    """What GPU code the file at `path` carries: {"sass": [sm_XY...], "ptx": [compute_XY...], "ptx_isa": ["8.8"],
    "elf_entries": N, "ptx_entries": N, "empty_elf_entries": N, "embedded_entries": N, "other_kinds": [...]}, or None
    when it carries none (no `.nv_fatbin` section nor containers in its data sections, only cubins without a kernel,
    not ELF). A bare fatbin file (nvcc -fatbin) is read whole. FatbinError on a `.nv_fatbin` section that does not
    parse; OSError when the file cannot be read."""
    sections = elf_sections(path)
    with open(path, "rb") as fh:
        fd = fh.fileno()
        embedded: list = []
        if sections:
            entries = fatbin_entries(fd, *sections[".nv_fatbin"]) if ".nv_fatbin" in sections else []
            for name in EMBEDDED_SECTIONS:
                if name in sections:
                    embedded += embedded_entries(fd, *sections[name])
        elif os.pread(fd, 4, 0) == MAGIC_BYTES:
            entries = fatbin_entries(fd, 0, os.fstat(fd).st_size)
        else:
            return None
    sass, ptx, isa, other = set(), set(), set(), set()
    n_elf = n_ptx = n_empty = 0
    for kind, arch, flags, major, minor in entries + embedded:
        if kind == KIND_PTX:
            n_ptx += 1
            ptx.add(arch_name(kind, arch, flags))
            isa.add(f"{major}.{minor}")
        elif kind in (KIND_ELF, KIND_ELF_ALT) and flags & EMPTY:
            n_empty += 1
        elif kind in (KIND_ELF, KIND_ELF_ALT):
            n_elf += 1
            sass.add(arch_name(kind, arch, flags))
        else:
            other.add(kind)
    if not (sass or ptx or other):
        return None
    return {"sass": sort_archs(sass), "ptx": sort_archs(ptx), "ptx_isa": sorted(isa, key=_num_key),
            "elf_entries": n_elf, "ptx_entries": n_ptx, "empty_elf_entries": n_empty, "embedded_entries": len(embedded),
            "other_kinds": sorted(other)}


def _num_key(text: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in text.replace("_", ".").split("."))


def arch_number(arch: str) -> int:
    """sm_90a -> 90, compute_120 -> 120."""
    digits = arch.split("_", 1)[-1].rstrip("abcdefghijklmnopqrstuvwxyz")
    return int(digits) if digits.isdigit() else 0


def sort_archs(archs) -> list[str]:
    """By number, then plain before a/f: sm_90, sm_90a, sm_100, sm_100f, sm_120."""
    return sorted(archs, key=lambda a: (arch_number(a), a))
