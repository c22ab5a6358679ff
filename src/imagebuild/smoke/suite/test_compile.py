"""torch.compile with the default Inductor backend: C++ kernels on CPU, Triton kernels on CUDA, compared with eager.
A failure names what the image lacks (C/C++ compiler, Python.h, libcuda in the loader cache)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the names only: pytest loads conftest itself
    from .conftest import CheckFn

pytestmark = pytest.mark.section("compile")


def test_toolchain(check: CheckFn) -> None:
    check("compile.toolchain")


def test_cpu_function(check: CheckFn) -> None:
    check("compile.cpu_function")


def test_cpu_module(check: CheckFn) -> None:
    check("compile.cpu_module")


def test_cpu_max_autotune(check: CheckFn) -> None:
    check("compile.cpu_max_autotune")


@pytest.mark.parametrize("what", ["function", "module"])
def test_cuda(check: CheckFn, what: str) -> None:
    check(f"compile.cuda_{what}", gpu=True)
