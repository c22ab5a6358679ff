"""Fixed facts the templates need beyond the resolved variant: repositories, signing keys, tool pins, package sets.

Changing anything here changes the rendered Dockerfiles (and so the inputs hashes) of the flavors that use it.
"""

from __future__ import annotations

# org.opencontainers.image.source of every image.
SOURCE_URL = "https://github.com/imagebuild/imagebuild"

# deadsnakes PPA (Ubuntu only): Pythons the OS doesn't ship. Key pinned by its primary fingerprint.
DEADSNAKES_URL = "http://ppa.launchpadcontent.net/deadsnakes/ppa/ubuntu"
DEADSNAKES_KEY_URL = "https://keyserver.ubuntu.com/pks/lookup?op=get&search=0xF23C5A6CF475977595C89F51BA6932366A755776"
DEADSNAKES_FINGERPRINT = "F23C5A6CF475977595C89F51BA6932366A755776"

# NVIDIA's CUDA apt repository (dev flavor, CUDA 12.x: PyPI has no nvcc driver for 12.x). Key 3bf863cc.
CUDA_REPO_URL = "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/"
CUDA_REPO_KEY = "3bf863cc.pub"
CUDA_REPO_FINGERPRINT = "EB693B3035CD5710E231E123A4B469963BF863CC"
CUDA_REPO_ARCH = "x86_64"
# ... per platform: NVIDIA's repository names arm64 servers (Grace) "sbsa"
CUDA_REPO_ARCHES = {"linux/amd64": "x86_64", "linux/arm64": "sbsa"}


def cuda_repo_arch(platform: str) -> str:
    return CUDA_REPO_ARCHES.get(platform, CUDA_REPO_ARCH)

# First CUDA major whose PyPI nvidia-cuda-nvcc carries the full toolchain (nvcc driver, cudafe++, ...).
CUDA_PIP_TOOLCHAIN_MIN_MAJOR = 13

# Header folders of the torch wheels' nvidia-* packages (cu12: one per package; cu13 merges most into nvidia/cu13/):
# on CPATH in dev images, since torch.utils.cpp_extension only adds CUDA_HOME/include and ATen's CUDA headers include
# cublas/cusparse/cusolver headers. Folders a variant lacks are harmless on CPATH.
NVIDIA_PIP_INCLUDE_PACKAGES = (
    "cublas", "cuda_cupti", "cuda_nvrtc", "cuda_runtime", "cudnn", "cufft", "curand", "cusolver", "cusparse",
    "cusparselt", "nccl", "nvjitlink", "nvshmem", "nvtx",
)

JUPYTERLAB_VERSION = "4.6.6"

# base: what every image needs besides Python.
BASE_APT = ("ca-certificates", "tini")

# dev: compilers, build tools, SSH, debugging.
DEV_APT = (
    "build-essential",
    "cmake",
    "curl",
    "gdb",
    "git",
    "htop",
    "iproute2",
    "less",
    "lsof",
    "ninja-build",
    "openssh-client",
    "openssh-server",
    "pkg-config",
    "procps",
    "strace",
    "unzip",
    "vim-tiny",
)

# runtime: the smallest toolchain `torch.compile` needs at run time: Inductor builds its CPU kernels with a C++
# compiler (OpenMP via libgomp), Triton builds its launcher with the C compiler; both include Python.h, which
# comes from libpython<X.Y>-dev (added per variant). Not make, cmake, git or debuggers: those are dev's.
RUNTIME_COMPILE_APT = ("g++", "gcc", "libc6-dev")

# transformer_engine builder stage (apt side; the pip side is computed from the variant).
TE_BUILD_APT = ("build-essential", "git")
TE_BUILD_PIP = ("ninja", "packaging", "pybind11", "setuptools", "wheel")
