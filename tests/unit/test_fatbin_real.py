"""Kernel coverage on real NVIDIA files (issue 40, items 2 and 5): the probe's own `.nv_fatbin` reader
(smoke/probe/fatbin.py) lists exactly what NVIDIA's cuobjdump lists, entry by entry and in order, on the libraries
of real PyPI wheels (_nvidia_wheels.py: nvidia-nvjpeg-cu12, nvidia-nvjpeg for CUDA 13), on a bare fatbin with
arch-specific and family code (tests/fixtures/fatbin/), and on a copy of a real library with one architecture's
entries removed from its fatbin; the coverage rules judge those files the way `imagebuild coverage` reports them,
and the probe's coverage section fails naming the library and the missing architecture, passes with what it read,
and skips a CPU torch."""

from __future__ import annotations

import json
import platform
import shutil
import struct
import subprocess
import types
from pathlib import Path

import pytest
from _fake_cuda_torch import H200, fake_cuda_torch
from _nvidia_wheels import CUFFT13, CUOBJDUMP, NVJPEG12, NVJPEG13, cuobjdump, unpacked, wheel
from click.testing import CliRunner

from imagebuild.cli import cli
from imagebuild.smoke import probe as P
from imagebuild.smoke.probe import coverage, fatbin

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ROOT / "tests" / "fixtures" / "fatbin" / "arch-variants.fatbin"
LIB12 = "nvidia/nvjpeg/lib/libnvjpeg.so.12"
LIB13 = "nvidia/cu13/lib/libnvjpeg.so.13"


def reader_listing(path: Path) -> tuple[list[str], list[str]]:
    """The reader's entries in file order, named as cuobjdump names them: family SASS (sm_100f) as sm_100, PTX by
    its sm_ name."""
    sections = fatbin.elf_sections(str(path))
    start, size = sections[".nv_fatbin"] if sections else (0, path.stat().st_size)
    elves, ptx = [], []
    with open(path, "rb") as fh:
        for kind, arch, flags, _major, _minor in fatbin.fatbin_entries(fh.fileno(), start, size):
            name = fatbin.arch_name(kind, arch, flags & ~fatbin.FLAG_FAMILY)
            if kind == fatbin.KIND_PTX:
                ptx.append(name.replace("compute_", "sm_"))
            elif kind in (fatbin.KIND_ELF, fatbin.KIND_ELF_ALT):
                elves.append(name)
    return elves, ptx


def cuobjdump_listing(path: Path) -> tuple[list[str], list[str]]:
    """`cuobjdump --list-elf` and `--list-ptx`: the arch of each line (`ELF file 1: libnvjpeg.so.1.sm_75.cubin`)."""
    if platform.machine() != "x86_64":
        pytest.skip(f"cuobjdump from {CUOBJDUMP} runs on x86_64 only (this is {platform.machine()})")
    exe = cuobjdump()
    out = []
    for flag, suffix in (("--list-elf", ".cubin"), ("--list-ptx", ".ptx")):
        res = subprocess.run([str(exe), flag, str(path)], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        out.append([line.rsplit(".", 2)[-2] for line in res.stdout.splitlines() if line.endswith(suffix)])
    return out[0], out[1]


def strip_arch(src: Path, dst: Path, arch: int) -> int:
    """A copy of `src` with every SASS entry of `arch` removed from its fatbin containers (the entries after it
    moved up, the container's size shrunk, zeros where they were); -> how many were removed."""
    shutil.copy(src, dst)
    off, size = fatbin.elf_sections(str(dst))[".nv_fatbin"]
    with open(dst, "r+b") as fh:
        fh.seek(off)
        data = bytearray(fh.read(size))
        pos, removed = 0, 0
        while pos + 16 <= size:
            magic, _version, head, fat = struct.unpack_from("<IHHQ", data, pos)
            if magic != fatbin.MAGIC:
                pos += 8
                continue
            entry, end, kept = pos + head, pos + head + fat, []
            while entry < end:
                kind, _, entry_head, payload = struct.unpack_from("<HHIQ", data, entry)
                if kind == fatbin.KIND_ELF and struct.unpack_from("<I", data, entry + 28)[0] == arch:
                    removed += 1
                else:
                    kept.append(bytes(data[entry:entry + entry_head + payload]))
                entry += entry_head + payload
            body = b"".join(kept)
            data[pos + head:end] = body + bytes(fat - len(body))
            struct.pack_into("<Q", data, pos + 8, len(body))
            pos = end
        fh.seek(off)
        fh.write(data)
    return removed


@pytest.fixture(scope="module")
def stripped(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stripped") / "libnvjpeg.so.12"
    assert strip_arch(unpacked(NVJPEG12) / LIB12, out, 90) == 11
    return out


@pytest.mark.parametrize("what", ["cu12", "cu13", "variants", "stripped"])
def test_the_reader_lists_what_cuobjdump_lists(what, stripped):
    path = {"cu12": lambda: unpacked(NVJPEG12) / LIB12, "cu13": lambda: unpacked(NVJPEG13) / LIB13,
            "variants": lambda: VARIANTS, "stripped": lambda: stripped}[what]()
    mine, theirs = reader_listing(path), cuobjdump_listing(path)
    assert mine == theirs
    assert len(mine[0]) == {"cu12": 165, "cu13": 100, "variants": 4, "stripped": 154}[what]
    assert len(mine[1]) == {"cu12": 10, "cu13": 10, "variants": 3, "stripped": 10}[what]


def test_what_the_reader_reports_of_real_libraries_and_arch_variants(stripped):
    cu12 = fatbin.read_fatbin(str(unpacked(NVJPEG12) / LIB12))
    assert cu12["sass"] == ["sm_50", "sm_52", "sm_60", "sm_61", "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90",
                            "sm_100", "sm_101", "sm_103", "sm_120", "sm_121"]
    assert cu12["ptx"] == ["compute_121"] and cu12["ptx_isa"] == ["8.8"]
    cu13 = fatbin.read_fatbin(str(unpacked(NVJPEG13) / LIB13))
    assert cu13["sass"][0] == "sm_75" and "sm_70" not in cu13["sass"] and cu13["ptx_isa"] == ["9.4"]
    variants = fatbin.read_fatbin(str(VARIANTS))
    assert variants["sass"] == ["sm_80", "sm_90a", "sm_100a", "sm_100f"]
    assert variants["ptx"] == ["compute_80", "compute_90a", "compute_120"]
    assert "sm_90" not in fatbin.read_fatbin(str(stripped))["sass"]
    # no device code: None (an ELF without .nv_fatbin; a file that is neither ELF nor a fatbin)
    assert fatbin.read_fatbin("/bin/sh") is None and fatbin.read_fatbin(str(ROOT / "pyproject.toml")) is None


def test_cufft_for_cuda_13_runs_on_sm_90_from_the_code_in_its_data_section():
    """A real CUDA 13 image failed coverage on sm_90 here (libcufft.so.12: "has SASS sm_75") while cuFFT runs on every
    GPU from sm_75 on: cuobjdump and `.nv_fatbin` see one sm_75 cubin in each library (libcufftw's has no kernel);
    libcufft's kernels are fatbin containers in `.ldata`, which the reader now reads too (test_fatbin_embedded.py)."""
    lib = unpacked(CUFFT13) / "nvidia/cu13/lib"
    for name in ("libcufft.so.12", "libcufftw.so.12"):
        assert reader_listing(lib / name) == cuobjdump_listing(lib / name) == (["sm_75"], [])
    cufft = fatbin.read_fatbin(str(lib / "libcufft.so.12"))
    assert {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"} <= set(cufft["sass"])
    assert cufft["embedded_entries"] > 20000 and fatbin.KIND_IR in cufft["other_kinds"]
    assert coverage.judge({"cufft": cufft}, ["sm_90", "sm_100"])["sm_90"]["runs"] == coverage.NATIVE
    assert fatbin.read_fatbin(str(lib / "libcufftw.so.12")) is None  # its one cubin holds no kernel


def test_a_truncated_fatbin_section_is_an_error_not_an_empty_reading(tmp_path):
    data = VARIANTS.read_bytes()
    bad = tmp_path / "bad.fatbin"
    bad.write_bytes(data[:16] + data[16:40])  # the container says more than there is
    with pytest.raises(fatbin.FatbinError, match="runs past"):
        fatbin.read_fatbin(str(bad))
    bad.write_bytes(struct.pack("<IHHQ", fatbin.MAGIC, 1, 0, 0) + bytes(64))  # a header of no size: no endless loop
    with pytest.raises(fatbin.FatbinError, match="header 0 bytes"):
        fatbin.read_fatbin(str(bad))


def test_coverage_rules_on_real_libraries(stripped):
    libs = {"cu12": fatbin.read_fatbin(str(unpacked(NVJPEG12) / LIB12)),
            "cu13": fatbin.read_fatbin(str(unpacked(NVJPEG13) / LIB13))}
    v = coverage.judge(libs, ["sm_90", "sm_89", "sm_70", "sm_122", "9.0"])
    assert list(v) == ["sm_90", "sm_89", "sm_70", "sm_122"]
    assert v["sm_90"] == {"runs": "native", "ptx_only": [], "missing": []}
    assert v["sm_122"] == {"runs": "native", "ptx_only": [], "missing": []}  # sm_121 SASS runs on sm_122
    assert v["sm_70"] == {"runs": "none", "ptx_only": [], "missing": ["cu13"]}  # CUDA 13 dropped sm_70
    assert coverage.failures(libs, v) == [
        "cu13: no sm_70 SASS or PTX (has SASS sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_103 sm_107 sm_120 sm_121, "
        "PTX compute_121)"]
    # only PTX: a GPU newer than every SASS major runs it through the JIT
    assert coverage.judge({"x": {"sass": ["sm_80"], "ptx": ["compute_80"]}}, ["sm_90"])["sm_90"]["runs"] == "ptx-jit"
    variants = {"v": fatbin.read_fatbin(str(VARIANTS))}
    got = {t: x["runs"] for t, x in coverage.judge(variants, ["sm_80", "sm_86", "sm_90", "sm_100", "sm_103",
                                                               "sm_120"]).items()}
    # sm_80 SASS runs on sm_86; sm_90a SASS on sm_90 itself; sm_100f on the sm_10x family; sm_120 has only PTX
    assert got == {"sm_80": "native", "sm_86": "native", "sm_90": "native", "sm_100": "native", "sm_103": "native",
                   "sm_120": "ptx-jit"}
    assert coverage.summary(coverage.judge({"s": fatbin.read_fatbin(str(stripped))}, ["sm_89", "sm_90"])) == (
        "natively: sm_89; not at all: sm_90")


def test_the_coverage_command_on_a_real_wheel_and_a_folder(tmp_path, stripped):
    def run(*args):
        return CliRunner().invoke(cli, ["coverage", *args], standalone_mode=False)

    res = run(str(wheel(NVJPEG12)), "--gpu", "sm_90", "--gpu", "sm_90a", "--gpu", "sm_120")
    assert res.return_value == 0, res.output
    assert "sm_90: runs natively" in res.output and "sm_120: runs natively" in res.output and "FAIL" not in res.output
    folder = tmp_path / "wheelhouse"
    (folder / "lib").mkdir(parents=True)
    shutil.copy(wheel(NVJPEG13), folder)
    shutil.copy(stripped, folder / "lib" / "libnvjpeg.so.12")
    res = run(str(folder), "--gpu", "sm_90", "--gpu", "sm_70", "--json")
    assert res.return_value == 1, res.output
    doc = json.loads(res.output)
    wheel13 = f"{wheel(NVJPEG13).name}!{LIB13}"
    assert sorted(doc["libraries"]) == ["lib/libnvjpeg.so.12", wheel13]
    assert doc["gpus"]["sm_90"] == {"runs": "none", "ptx_only": [], "missing": ["lib/libnvjpeg.so.12"]}
    assert doc["gpus"]["sm_70"]["missing"] == [wheel13] and doc["ok"] is False
    assert doc["failures"][0].startswith("lib/libnvjpeg.so.12: no sm_90 SASS or PTX (has SASS sm_50 ")
    bad = run(str(folder), "--gpu", "hopper")
    assert "--gpu 'hopper': want sm_XY" in str(bad.exception)


def _site(tmp_path: Path, *libs: tuple[str, Path]) -> Path:
    site = tmp_path / "site-packages"
    for rel, src in libs:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, site / rel)
    return site


def _run_section(torch, roots, visible=()):
    p = P.Probe(["coverage"])
    p.torch = torch
    p._gpu = (bool(visible), "" if visible else P.NO_GPU)
    coverage.report(p, torch, [str(r) for r in roots])
    return p, {c["name"]: c for c in p.doc["checks"]}["coverage.kernels"]


def test_the_probe_section_reads_the_images_libraries(tmp_path, stripped):
    good = _site(tmp_path / "good", (LIB12, unpacked(NVJPEG12) / LIB12))
    p, c = _run_section(fake_cuda_torch(devices=()), [good])
    assert c["status"] == "passed" and c["reason"].startswith("1 CUDA libraries read (SASS sm_50 ")
    lib = str((good / LIB12).resolve())
    assert p.doc["coverage"]["libraries"][lib]["sass"][-1] == "sm_121"
    # a GPU host: the visible H200 (sm_90) is judged too; a library stripped of sm_90 fails naming it
    bad = _site(tmp_path / "bad", (LIB12, stripped))
    p, c = _run_section(fake_cuda_torch(devices=(H200,)), [bad], visible=(H200,))
    assert c["status"] == "failed" and f"{(bad / LIB12).resolve()} (unowned): no sm_90 SASS or PTX" in c["reason"]
    p, c = _run_section(fake_cuda_torch(devices=(H200,)), [good], visible=(H200,))
    assert c["status"] == "passed" and c["reason"].endswith("the visible GPUs run natively: sm_90")


def test_the_probe_section_skips_a_cpu_torch_and_fails_a_cuda_torch_without_gpu_code(tmp_path):
    empty = tmp_path / "empty"
    (empty / "torch" / "lib").mkdir(parents=True)
    shutil.copy("/bin/true", empty / "torch" / "lib" / "libtorch_cpu.so")
    cpu = types.SimpleNamespace(__version__="2.13.0+cpu", version=types.SimpleNamespace(cuda=None))
    _, c = _run_section(cpu, [empty])
    assert c == {"name": "coverage.kernels", "section": "coverage", "status": "skipped", "figures": {},
                 "reason": "no CUDA libraries: torch 2.13.0+cpu is built without CUDA"}
    _, c = _run_section(fake_cuda_torch(devices=()), [empty])
    assert c["status"] == "failed" and "is built for CUDA 12.8, but no library under" in c["reason"]
