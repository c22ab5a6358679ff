"""Dev flavor: C++ extension, nvcc, JupyterLab with token auth, sshd config with password auth off."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("dev")


def test_cpp_extension(check: Callable[..., dict[str, Any]]) -> None:
    check("dev.cpp_extension")


def test_nvcc(check: Callable[..., dict[str, Any]]) -> None:
    check("dev.nvcc")


def test_jupyter(check: Callable[..., dict[str, Any]]) -> None:
    check("dev.jupyter")


def test_sshd(check: Callable[..., dict[str, Any]]) -> None:
    check("dev.sshd")
