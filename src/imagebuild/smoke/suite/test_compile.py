"""torch.compile with the default Inductor backend: C++ kernels on CPU, Triton kernels on CUDA, compared with eager.
A failure names what the image lacks (C/C++ compiler, Python.h, libcuda in the loader cache)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("compile")


def test_toolchain(check: Callable[..., dict[str, Any]]) -> None:
    check("compile.toolchain")


def test_cpu_function(check: Callable[..., dict[str, Any]]) -> None:
    check("compile.cpu_function")


def test_cpu_module(check: Callable[..., dict[str, Any]]) -> None:
    check("compile.cpu_module")


def test_cpu_max_autotune(check: Callable[..., dict[str, Any]]) -> None:
    check("compile.cpu_max_autotune")


@pytest.mark.parametrize("what", ["function", "module"])
def test_cuda(check: Callable[..., dict[str, Any]], what: str) -> None:
    check(f"compile.cuda_{what}", gpu=True)
