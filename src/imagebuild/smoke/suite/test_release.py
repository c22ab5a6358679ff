"""PyTorch's release smoke checks, as they apply to an image: OpenMP, CPU ISA, conv2d, SVD, numpy; cuDNN/NCCL
versions against the compile-time version and the nvidia-* packages; CUDA and GDS errors surface as exceptions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("release")


@pytest.mark.parametrize("name", ["openmp", "cpu_isa", "conv2d_cpu", "linalg_cpu", "numpy"])
def test_cpu(check: Callable[..., dict[str, Any]], name: str) -> None:
    check(f"release.{name}")


@pytest.mark.parametrize("name", ["cudnn_compile_version", "cudnn_package", "nccl_package"])
def test_cuda_libraries(check: Callable[..., dict[str, Any]], name: str) -> None:
    check(f"release.{name}")


@pytest.mark.parametrize("name", ["conv2d_cuda", "linalg_cuda", "cuda_errors", "gds_errors"])
def test_gpu(check: Callable[..., dict[str, Any]], name: str) -> None:
    check(f"release.{name}", gpu=True)
