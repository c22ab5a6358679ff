"""Dev flavor: C++ extension, nvcc, JupyterLab with token auth, sshd config with password auth off."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the names only: pytest loads conftest itself
    from .conftest import CheckFn

pytestmark = pytest.mark.section("dev")


def test_cpp_extension(check: CheckFn) -> None:
    check("dev.cpp_extension")


def test_nvcc(check: CheckFn) -> None:
    check("dev.nvcc")


def test_jupyter(check: CheckFn) -> None:
    check("dev.jupyter")


def test_sshd(check: CheckFn) -> None:
    check("dev.sshd")
