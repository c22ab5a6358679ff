"""Real NVIDIA wheels from PyPI for the coverage and NCCL tests, downloaded once into a cache folder and pinned by
sha256 (IMAGEBUILD_NVIDIA_WHEELS, default ~/.cache/imagebuild/nvidia-wheels). The smallest wheels that carry
multi-architecture fatbins (measured 2026-12: nvidia-cuda-runtime-cu12, -nvrtc-cu12, -cupti-cu12, -nvjitlink-cu12
and -nvtx-cu12 carry no device code at all; nvidia-curand-cu12 does, at 68 MB):

    nvidia-nvjpeg-cu12 12.4.0.76   5.3 MB  libnvjpeg.so.12: SASS sm_50..sm_121, PTX compute_121 (CUDA 12 layout)
    nvidia-nvjpeg 13.3.2.43        3.8 MB  nvidia/cu13/lib/libnvjpeg.so.13: SASS sm_75..sm_121 (CUDA 13: no suffix)
    nvidia-cuda-cuobjdump 13.5.37  0.3 MB  NVIDIA's cuobjdump, the reference the probe's reader is compared with
    nvidia-cufft 12.0.0.61       214 MB  nvidia/cu13/lib/libcufft.so.12 (CUDA 13.0, torch 2.13.0+cu130's pin): its
                                           kernels in `.ldata`, an empty sm_75 cubin in `.nv_fatbin`; libcufftw.so.12
                                           only that empty cubin (fatbin.py's module doc)

When a wheel is neither cached nor downloadable (no PyPI) the test skips saying so; under IMAGEBUILD_REQUIRE_ENGINE=1
(`make test`, CI) it fails instead. A cached or downloaded file whose sha256 differs from the pin is an error.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("IMAGEBUILD_NVIDIA_WHEELS", Path.home() / ".cache" / "imagebuild" / "nvidia-wheels"))
PLATFORM = "manylinux2014_x86_64.manylinux_2_17_x86_64"
WHEELS = {  # requirement -> (file name, sha256, size)
    "nvidia-nvjpeg-cu12==12.4.0.76": (f"nvidia_nvjpeg_cu12-12.4.0.76-py3-none-{PLATFORM}.whl",
                                      "3888f10b32fbd58e80166c48e01073732d752fa5f167b7cb5b9615f1c6375a20", 5313609),
    "nvidia-nvjpeg==13.3.2.43": (f"nvidia_nvjpeg-13.3.2.43-py3-none-{PLATFORM}.whl",
                                 "27f9c4a25a73f1d1ad35c342c8d657c8ff43e23877f338ef15fb2602ac2e5aa8", 3847265),
    "nvidia-cuda-cuobjdump==13.5.37": (f"nvidia_cuda_cuobjdump-13.5.37-py3-none-{PLATFORM}.whl",
                                       "38780fee50863252a0b8926357faa91615ca1c8346490563f33a06100cd73f58", 290354),
    "nvidia-cufft==12.0.0.61": (f"nvidia_cufft-12.0.0.61-py3-none-{PLATFORM}.whl",
                                "6c44f692dce8fd5ffd3e3df134b6cdb9c2f72d99cf40b62c32dde45eea9ddad3", 214085489),
    # not NVIDIA's: the first pip with fast lazy wheels, for the resolve stage's test (test_resolve_lazy_wheels.py)
    "pip==26.3": ("pip-26.3-py3-none-any.whl", "f3b60b20ffaadd4415ed7957212a38ac63fa4c5fa375bd0f4a797777940fad13",
                  1950951),
}
NVJPEG12, NVJPEG13, CUOBJDUMP, CUFFT13, PIP = WHEELS


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _unavailable(why: str):
    if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
        pytest.fail(why)
    pytest.skip(why)


def wheel(requirement: str) -> Path:
    """The cached wheel of `requirement` (one of WHEELS), downloaded with pip the first time."""
    name, sha, _size = WHEELS[requirement]
    path = CACHE / name
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            out = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                  "--dest", str(CACHE), requirement], capture_output=True, text=True, timeout=600)
            if not path.exists():
                _unavailable(f"{requirement} is not in {CACHE} and pip could not download it (no PyPI?): "
                             + " | ".join((out.stderr or out.stdout).strip().splitlines()[-2:]))
        got = _sha256(path)
        if got != sha:
            path.rename(path.with_suffix(".bad"))
            pytest.fail(f"{path}: sha256 {got}, pinned {sha} (moved aside; the next run downloads it again)")
    return path


def unpacked(requirement: str) -> Path:
    """The wheel unpacked once beside it (<cache>/<file name>.d/: its nvidia/ files and .dist-info), like a
    site-packages folder after `pip install --no-deps`."""
    path = wheel(requirement)
    target = path.with_name(path.name + ".d")
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").exists():
            with zipfile.ZipFile(path) as zf:
                zf.extractall(target)
            (target / ".complete").write_text(WHEELS[requirement][1] + "\n")
    return target


def cuobjdump() -> Path:
    """NVIDIA's cuobjdump from its PyPI wheel (x86_64 Linux only)."""
    exe = next(unpacked(CUOBJDUMP).rglob("bin/cuobjdump"))
    exe.chmod(0o755)
    return exe
