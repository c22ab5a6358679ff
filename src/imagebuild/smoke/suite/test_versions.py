"""Truth of the image: the versions inside equal the plan's pins / the image's io.imagebuild.* labels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("versions")

RUNTIME_KEYS = ["torch", "cuda", "cudnn", "nccl", "torchvision", "torchaudio", "transformer_engine", "triton"]


def test_python(probe: dict[str, Any], expect_value: Callable[..., Any]) -> None:
    expect_value("python", probe["versions"]["python"])


@pytest.mark.section("system")  # the OS is the system section's fact: runs with it (`--sections versions` alone skips it)
def test_os(probe: dict[str, Any], expect_value: Callable[..., Any]) -> None:
    osr = probe["system"]["os"]
    expect_value("os", osr.get("key"), shown=f"{osr.get('key')} ({osr.get('pretty_name')})")


@pytest.mark.flavor("runtime")
@pytest.mark.parametrize("key", RUNTIME_KEYS)
def test_version(probe: dict[str, Any], expect_value: Callable[..., Any], key: str) -> None:
    v = probe["versions"]
    err = v.get("import_errors", {}).get(key if key != "transformer_engine" else "transformer_engine")
    found = v.get(key)
    if key == "cuda" and v.get("torch") and not found:
        shown = "cpu (torch built without CUDA)"
    else:
        shown = found if found else (f"import failed: {err}" if err else "not installed")
    expect_value(key, found, shown=shown)
    if err and key in ("torch", "torchvision", "torchaudio"):
        pytest.fail(f"{key} is installed but does not import: {err}", pytrace=False)
