"""Dev flavor: C++ extension, nvcc, JupyterLab with token auth, sshd config with password auth off."""

import pytest

pytestmark = pytest.mark.section("dev")


def test_cpp_extension(check):
    check("dev.cpp_extension")


def test_nvcc(check):
    check("dev.nvcc")


def test_jupyter(check):
    check("dev.jupyter")


def test_sshd(check):
    check("dev.sshd")
