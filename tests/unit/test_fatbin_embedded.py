"""GPU code outside `.nv_fatbin` and cubins without a kernel (smoke/probe/fatbin.py, issue 40 item 2).

Found on a real CUDA 13 image (torch 2.13.0+cu130, `make e2e-loop-cuda`): nvidia-cufft 12.0.0.61's libcufft.so.12
keeps one empty sm_75 device-link image in `.nv_fatbin` and its ~24,000 real containers in `.ldata`;
libcufftw.so.12's only entry is such an empty cubin. The coverage check read `.nv_fatbin` alone and failed that working
image on sm_90. Here, synthetic ELF files of the same shapes (built below, byte by byte); test_fatbin_real.py reads
the real wheel.
"""

from __future__ import annotations

import struct
from pathlib import Path

from imagebuild.smoke.probe import coverage, fatbin

SHT_PROGBITS, SHT_STRTAB, SHT_NOBITS = 1, 3, 8


def elf(sections: list[tuple[str, int, bytes]], machine: int = 62) -> bytes:
    """A little-endian ELF64 file holding `sections` ([(name, type, bytes)]) and their section header table."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _, _ in sections) + b".shstrtab\0"
    body, headers, name_at = b"", [bytes(64)], 1
    for name, kind, data in [*sections, (".shstrtab", SHT_STRTAB, names)]:
        offset = 64 + len(body)
        size = len(data)
        if kind == SHT_NOBITS:  # (no bytes in the file: its offset points at whatever follows)
            offset, size = 64, len(data)
        else:
            body += data + bytes(-len(data) % 8)
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, kind, 0, 0, offset, size, 0, 0, 8, 0))
        name_at += len(name) + 1
    shoff = 64 + len(body)
    head = (b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
            + struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(headers),
                          len(headers) - 1))
    return head + body + b"".join(headers)


def cubin(kernel: bool) -> bytes:
    """A device ELF (EM_CUDA) with a kernel's `.text.<name>` section, or only the notes an empty device link writes."""
    sections = [(".nv.info", SHT_PROGBITS, b"\0" * 8), (".nv.callgraph", SHT_PROGBITS, b"\0" * 8)]
    if kernel:
        sections.append((".text._Z6kernelv", SHT_PROGBITS, b"\x00" * 32))
    return elf(sections, machine=190)


def entry(kind: int, arch: int, payload: bytes, flags: int = 0x11, version: tuple[int, int] = (1, 8)) -> bytes:
    head = struct.pack("<HHIQIIHHIIIQ", kind, 257, 64, len(payload), 0, 0, version[1], version[0], arch, 0, 0, flags)
    return head + bytes(64 - len(head)) + payload


def container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, len(body)) + body


def write(tmp_path: Path, name: str, sections: list[tuple[str, int, bytes]]) -> str:
    path = tmp_path / name
    path.write_bytes(elf(sections))
    return str(path)


def test_code_in_a_data_section_counts_and_an_empty_cubin_does_not(tmp_path):
    stub = container(entry(fatbin.KIND_ELF, 75, cubin(kernel=False)))
    real = container(entry(fatbin.KIND_ELF, 90, cubin(kernel=True)), entry(fatbin.KIND_PTX, 90, b"ptx\0" * 8))
    # before the real container: a magic number that is no container (version 7) and data after it
    junk = struct.pack("<IHHQ", fatbin.MAGIC, 7, 16, 1 << 40) + b"\x55" * 40
    lib = write(tmp_path, "libcufft-like.so", [(".nv_fatbin", SHT_PROGBITS, stub),
                                               (".ldata", SHT_PROGBITS, b"\1" * 24 + junk + real),
                                               (".lbss", SHT_NOBITS, bytes(4096))])
    reading = fatbin.read_fatbin(lib)
    assert reading is not None
    assert reading["sass"] == ["sm_90"] and reading["ptx"] == ["compute_90"]
    assert (reading["elf_entries"], reading["empty_elf_entries"], reading["embedded_entries"]) == (1, 1, 2)
    v = coverage.judge({lib: reading}, ["sm_90", "sm_75"])
    assert v["sm_90"]["runs"] == coverage.NATIVE and v["sm_75"]["runs"] == coverage.NO_CODE
    assert set(fatbin.elf_sections(lib)) - {""} == {".nv_fatbin", ".ldata", ".shstrtab"}  # no NOBITS section


def test_a_library_whose_only_cubin_has_no_kernel_carries_no_gpu_code(tmp_path):
    """libcufftw.so.12's shape: nothing a GPU could lack, so nothing to judge."""
    lib = write(tmp_path, "libcufftw-like.so", [(".nv_fatbin", SHT_PROGBITS,
                                                 container(entry(fatbin.KIND_ELF, 75, cubin(kernel=False))))])
    assert fatbin.read_fatbin(lib) is None
    with_kernel = write(tmp_path, "lib-kernel.so", [(".nv_fatbin", SHT_PROGBITS,
                                                     container(entry(fatbin.KIND_ELF, 75, cubin(kernel=True))))])
    assert fatbin.read_fatbin(with_kernel)["sass"] == ["sm_75"]


def test_a_compressed_cubin_counts_as_code_it_is_never_opened(tmp_path):
    """Compressed entries (flags 0x2000 or 0x8000) cannot be looked into without decompressing: code, as before."""
    for flag in (0x2000, 0x8000):
        lib = write(tmp_path, f"lib-{flag:x}.so", [(".nv_fatbin", SHT_PROGBITS, container(
            entry(fatbin.KIND_ELF, 75, cubin(kernel=False), flags=0x11 | flag)))])
        reading = fatbin.read_fatbin(lib)
        assert reading["sass"] == ["sm_75"] and reading["empty_elf_entries"] == 0


def test_a_damaged_container_in_data_is_skipped_but_in_nv_fatbin_is_an_error(tmp_path):
    """A data section is not the toolchain's: a container there that does not parse is skipped; `.nv_fatbin` is,
    so one there fails as before (FatbinError)."""
    good = container(entry(fatbin.KIND_ELF, 90, cubin(kernel=True)))
    cut = good[:-8]  # the last entry runs past its container
    lib = write(tmp_path, "lib-data.so", [(".rodata", SHT_PROGBITS, cut + bytes(8) + good)])
    assert fatbin.read_fatbin(lib)["sass"] == ["sm_90"]
    bad = write(tmp_path, "lib-bad.so", [(".nv_fatbin", SHT_PROGBITS, cut)])
    try:
        fatbin.read_fatbin(bad)
    except fatbin.FatbinError:
        pass
    else:
        raise AssertionError("a damaged .nv_fatbin read as fine")
