"""One NCCL, the right one (issue 40, items 3 and 5): the probe's cudalibs rows, two-sided, on site folders laid out
as pip lays them out. The nvidia-* wheels' metadata and files are real PyPI wheels (_nvidia_wheels.py: nvidia-nvjpeg
for CUDA 12 with its -cu12 suffix, nvidia-nvjpeg for CUDA 13 with none, under nvidia/cu13/); libnccl is a tiny
shared library built here with the system cc that exports ncclGetVersion (a real nvidia-nccl-cu12 wheel is over
200 MB), and torch's dist-info carries the Requires-Dist pins of torch 2.9.1 from PyPI (BRIEF.md: NCCL 2.27.5,
cuDNN 9.10.2.21)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from _fake_cuda_torch import fake_cuda_torch
from _nvidia_wheels import NVJPEG12, NVJPEG13, unpacked

from imagebuild.smoke import probe as P
from imagebuild.smoke.probe import cudalibs
from imagebuild.smoke.probe.sharedlibs import dist_owners

TORCH_REQUIRES = ("nvidia-nccl-cu12==2.27.5; platform_system == \"Linux\" and platform_machine == \"x86_64\"",
                  "nvidia-cudnn-cu12==9.10.2.21; platform_system == \"Linux\"", "filelock", "sympy>=1.13.3")


def libnccl(tmp_path: Path, version: int, name: str = "libnccl.so.2") -> Path:
    """A shared library whose ncclGetVersion answers `version` (22705 = 2.27.5), SONAME libnccl.so.2."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the stand-in libnccl")
    tmp_path.mkdir(parents=True, exist_ok=True)
    src = tmp_path / f"nccl{version}.c"
    src.write_text(f"int ncclGetVersion(int *v) {{ *v = {version}; return 0; }}\n")
    out = tmp_path / f"build{version}" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o", str(out), str(src)], check=True,
                   timeout=60)
    return out


def dist(site: Path, name: str, version: str, files=(), requires=()) -> None:
    """A dist-info folder as pip writes it: METADATA (Name, Version, Requires-Dist) and a RECORD of `files`."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files) + f"{info.name}/RECORD,,\n")


def copy_wheel(site: Path, requirement: str) -> None:
    shutil.copytree(unpacked(requirement), site, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".complete"))


def cuda12_site(tmp_path: Path, nccl_code: int = 22705) -> Path:
    """torch 2.9.1's pins, nvidia-nccl-cu12 2.27.5 with its libnccl.so.2, and the real nvidia-nvjpeg-cu12 wheel."""
    site = tmp_path / "site-packages"
    dist(site, "torch", "2.9.1", requires=TORCH_REQUIRES)
    lib = site / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    lib.parent.mkdir(parents=True)
    shutil.copy(libnccl(tmp_path, nccl_code), lib)
    dist(site, "nvidia-nccl-cu12", "2.27.5", files=["nvidia/nccl/lib/libnccl.so.2"])
    copy_wheel(site, NVJPEG12)
    return site


def report(site: Path, torch=None) -> dict:
    p = P.Probe(["cudalibs"])
    torch = torch or fake_cuda_torch(devices=())  # torch 2.13.0+cu128 built against NCCL 2.27.5, cuDNN 9.10.2
    cudalibs.report(p, torch, cudalibs.installed([str(site)]), cudalibs.library_copies([str(site)]),
                    dist_owners([str(site)]))
    return {c["name"].split(".", 1)[1]: (c["status"], c["reason"]) for c in p.doc["checks"]}


def test_one_nccl_of_the_pinned_version_and_one_cuda_major_pass(tmp_path):
    site = cuda12_site(tmp_path)
    got = report(site)
    lib = (site / "nvidia" / "nccl" / "lib" / "libnccl.so.2").resolve()
    assert got["nccl_one"] == ("passed", f"one copy: {lib} (nvidia-nccl-cu12): NCCL 2.27.5")
    assert got["nccl_version"] == ("passed", "libnccl 2.27.5 = torch was built against NCCL 2.27.5, torch requires "
                                             "nvidia-nccl-cu12== 2.27.5, nvidia-nccl-cu12 installed 2.27.5")
    assert got["majors"] == ("passed", "one CUDA major: 12 across 2 nvidia-* wheels, torch's CUDA 12.8")


def test_an_nccl_of_another_version_fails_naming_both(tmp_path):
    got = report(cuda12_site(tmp_path, nccl_code=22602))
    assert got["nccl_version"] == ("failed", "libnccl is 2.26.2, torch was built against NCCL 2.27.5; libnccl is "
                                             "2.26.2, torch requires nvidia-nccl-cu12== 2.27.5; libnccl is 2.26.2, "
                                             "nvidia-nccl-cu12 installed 2.27.5")
    # torch built against another NCCL than the library and the pins say
    got = report(cuda12_site(tmp_path / "b"), fake_cuda_torch(devices=(), nccl=(2, 28, 9)))
    assert got["nccl_version"] == ("failed", "libnccl is 2.27.5, torch was built against NCCL 2.28.9")


def test_a_second_libnccl_fails_naming_both_copies_and_their_versions(tmp_path):
    site = cuda12_site(tmp_path)
    vendored = site / "torch" / "lib" / "libnccl.so.2"
    vendored.parent.mkdir(parents=True)
    shutil.copy(libnccl(tmp_path / "second", 22803), vendored)
    got = report(site)
    status, reason = got["nccl_one"]
    assert status == "failed" and reason.startswith("2 copies of libnccl can load: ")
    assert f"{(site / 'nvidia/nccl/lib/libnccl.so.2').resolve()} (nvidia-nccl-cu12): NCCL 2.27.5" in reason
    assert f"{vendored.resolve()} (unowned): NCCL 2.28.3" in reason
    assert got["nccl_version"][0] == "failed"  # which copy loads is not one answer: nothing to compare


def test_a_libnccl_without_nccl_get_version_does_not_count_as_loadable(tmp_path):
    site = cuda12_site(tmp_path)
    lib = site / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    shutil.copy("/bin/true", lib)
    status, reason = report(site)["nccl_one"]
    assert status == "failed" and f"{lib.resolve()} (nvidia-nccl-cu12): does not load: OSError: " in reason


def test_cuda_12_and_cuda_13_wheels_in_one_environment_fail(tmp_path):
    site = cuda12_site(tmp_path)
    copy_wheel(site, NVJPEG13)  # the real CUDA 13 wheel: no -cu13 suffix, its files under nvidia/cu13/
    assert cudalibs.installed([str(site)])[1] == {"nvidia-nccl-cu12": "12", "nvidia-nvjpeg-cu12": "12",
                                                  "nvidia-nvjpeg": "13"}
    assert report(site)["majors"] == ("failed", "nvidia-* wheels of CUDA 12 (nvidia-nccl-cu12, nvidia-nvjpeg-cu12) "
                                                "and CUDA 13 (nvidia-nvjpeg)")


def test_cudnn_and_cublas_majors_disagreeing_fail_naming_both(tmp_path):
    site = cuda12_site(tmp_path)
    (site / "nvidia" / "cudnn" / "lib").mkdir(parents=True)
    shutil.copy("/bin/true", site / "nvidia" / "cudnn" / "lib" / "libcudnn.so.8")
    dist(site, "nvidia-cublas", "13.0.2.14", files=["nvidia/cu13/lib/libcublas.so.13"])
    status, reason = report(site)["majors"]
    assert status == "failed"
    assert "cuDNN majors differ: torch was built against cuDNN 9, libcudnn.so.8 found 8" in reason
    assert "cuBLAS majors differ: torch's CUDA 12, nvidia-cublas 13.0.2.14 installed 13" in reason
    assert "nvidia-* wheels of CUDA 12 (nvidia-nccl-cu12, nvidia-nvjpeg-cu12) and CUDA 13 (nvidia-cublas)" in reason


def test_a_cpu_torch_skips_nccl_saying_why_but_still_judges_the_wheels(tmp_path):
    cpu = fake_cuda_torch(devices=(), cuda=None)
    empty = tmp_path / "empty"
    empty.mkdir()
    why = "no NCCL: torch 2.13.0+cpu is built without CUDA"
    assert report(empty, cpu) == {"nccl_one": ("skipped", why), "nccl_version": ("skipped", why), "majors": (
        "skipped", "no nvidia-* wheels and torch 2.13.0+cpu is built without CUDA: no CUDA libraries to compare")}
    mixed = tmp_path / "mixed"
    copy_wheel(mixed, NVJPEG12)
    copy_wheel(mixed, NVJPEG13)
    assert report(mixed, cpu)["majors"][0] == "failed"


@pytest.mark.parametrize("code, dotted", [(22705, "2.27.5"), (22809, "2.28.9"), (2708, "2.7.8"), (21903, "2.19.3")])
def test_nccl_version_codes(code, dotted):
    assert cudalibs.nccl_version_of(code) == dotted


def test_version_comparison_and_pins():
    assert cudalibs.same_version("2.27.5", "2.27.5.1") and cudalibs.same_version("2.27.5+cuda12.9", "2.27.5")
    assert not cudalibs.same_version("2.27.5", "2.27.7") and not cudalibs.same_version(None, "2.27.5")
    assert P.same_nccl_version("2.27.5", "2.27") and not P.same_nccl_version("2.27.5", "2.28")
    assert cudalibs.torch_pins(TORCH_REQUIRES) == {"nvidia-nccl-cu12": "2.27.5", "nvidia-cudnn-cu12": "9.10.2.21"}
    assert cudalibs.dist_cuda_major("nvidia_nccl_cu13") == "13" and cudalibs.dist_cuda_major("nvidia-nvtx") is None
