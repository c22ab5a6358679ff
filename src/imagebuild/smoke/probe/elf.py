"""Just enough ELF for the ldd check, standard library only: the header (class, byte order, type, machine) and the
dynamic segment (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH), read with seeks (libtorch_cuda.so is over 1 GB)."""

from __future__ import annotations

import struct

ET_DYN = 3
# e_machine -> the name `uname -m` gives that machine (what a wheel's platform tag says too)
MACHINES = {3: "i386", 8: "mips", 20: "ppc", 21: "ppc64le", 22: "s390x", 40: "arm", 62: "x86_64", 183: "aarch64",
            243: "riscv64"}


def machine_name(header) -> str:
    """The machine an elf_header() names: `aarch64`, `x86_64` (and 32-bit when the class says so), else its number."""
    name = MACHINES.get(header[3], f"e_machine {header[3]}")
    return name if header[0] == 2 or name in ("i386", "arm", "ppc", "mips") else f"{name} (32-bit)"
def elf_header(path: str):
    """(class, byte order, e_type, e_machine) of an ELF file, else None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    order = "<" if head[5] == 1 else ">"
    e_type, e_machine = struct.unpack(order + "HH", head[16:20])
    return head[4], head[5], e_type, e_machine


PT_LOAD, PT_DYNAMIC = 1, 2
DT_NEEDED, DT_STRTAB, DT_SONAME, DT_RPATH, DT_RUNPATH = 1, 5, 14, 15, 29


def elf_dynamic(path: str) -> dict | None:
    """DT_NEEDED, DT_SONAME, DT_RPATH and DT_RUNPATH of an ELF shared object, from its dynamic segment. None when it
    is not ELF or has no dynamic segment."""
    try:
        with open(path, "rb") as fh:
            ident = fh.read(64)
            if len(ident) < 52 or ident[:4] != b"\x7fELF":
                return None
            order = "<" if ident[5] == 1 else ">"
            wide = ident[4] == 2
            if wide:
                phoff, = struct.unpack(order + "Q", ident[32:40])
                phentsize, phnum = struct.unpack(order + "HH", ident[54:58])
                ph_fmt, dyn_fmt = order + "IIQQQQQQ", order + "qQ"
            else:
                phoff, = struct.unpack(order + "I", ident[28:32])
                phentsize, phnum = struct.unpack(order + "HH", ident[42:46])
                ph_fmt, dyn_fmt = order + "IIIIIIII", order + "iI"
            loads, dynamic = [], None
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
            for i in range(phnum):
                f = struct.unpack(ph_fmt, table[i * phentsize:i * phentsize + struct.calcsize(ph_fmt)])
                # 64-bit: type, flags, offset, vaddr, paddr, filesz; 32-bit: type, offset, vaddr, paddr, filesz
                p_type, off, vaddr, filesz = (f[0], f[2], f[3], f[5]) if wide else (f[0], f[1], f[2], f[4])
                if p_type == PT_LOAD:
                    loads.append((vaddr, off, filesz))
                elif p_type == PT_DYNAMIC:
                    dynamic = (off, filesz)
            if dynamic is None:
                return None
            fh.seek(dynamic[0])
            raw = fh.read(dynamic[1])
            size = struct.calcsize(dyn_fmt)
            entries = []
            for i in range(0, len(raw) - size + 1, size):
                tag, val = struct.unpack(dyn_fmt, raw[i:i + size])
                if tag == 0:
                    break
                entries.append((tag, val))
            strtab = next((v for t, v in entries if t == DT_STRTAB), None)
            base = next((off + strtab - vaddr for vaddr, off, filesz in loads
                         if strtab is not None and vaddr <= strtab < vaddr + filesz), None)
            if base is None:
                return None

            def string(offset):
                fh.seek(base + offset)
                data = fh.read(4096)
                return data.split(b"\0", 1)[0].decode(errors="replace")

            out: dict = {"needed": [], "soname": None, "rpath": None, "runpath": None}
            for tag, val in entries:
                if tag == DT_NEEDED:
                    out["needed"].append(string(val))
                elif tag == DT_SONAME:
                    out["soname"] = string(val)
                elif tag == DT_RPATH:
                    out["rpath"] = string(val)
                elif tag == DT_RUNPATH:
                    out["runpath"] = string(val)
            return out
    except (OSError, struct.error):
        return None


def search_path_note(dyn: dict | None) -> str:
    """How a library looks for its dependencies, for a failure message."""
    if not dyn:
        return ""
    if dyn.get("runpath") is not None:
        return f"RUNPATH {dyn['runpath'] or '(empty)'}"
    if dyn.get("rpath") is not None:
        return f"RPATH {dyn['rpath'] or '(empty)'}"
    return "no RPATH/RUNPATH"
