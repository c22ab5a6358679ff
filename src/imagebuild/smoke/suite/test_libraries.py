"""One copy: exactly one libcudnn / libnccl / libcublas / libcudart of each major (system paths, site-packages,
auditwheel's <pkg>.libs/ folders), each failure naming the package that brought each copy."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.section("libraries")


def _major(v: Any) -> str | None:
    return str(v).split(".")[0] if v and str(v).strip() else None


@pytest.mark.parametrize("family", ["cudnn", "nccl", "cublas", "cudart"])
def test_one_copy(probe: dict[str, Any], smoke: Any, figures: Callable[[dict[str, Any]], None], probe_lib: ModuleType, family: str) -> None:
    copies = {k: v for k, v in probe["libraries"]["copies"].items() if probe_lib.library_family(k) == family}
    owners = probe["libraries"].get("owners") or {}
    figures({"copies": copies, "owners": {p: owners.get(p) for v in copies.values() for p in v}})
    dups = {k: v for k, v in copies.items() if len(v) > 1}
    if dups:
        pytest.fail("; ".join(probe_lib.describe_copies(k, v, owners) for k, v in dups.items()), pytrace=False)
    required = None
    if smoke.flavor != "base" and not smoke.cpu_variant():
        if family == "cudnn":
            major = _major(smoke.expected_value("cudnn")) or _major(probe["versions"].get("cudnn"))
            required = f"libcudnn.so.{major}" if major else None
        elif family == "nccl":
            major = _major(smoke.expected_value("nccl")) or _major(probe["versions"].get("nccl"))
            required = f"libnccl.so.{major}" if major else None
        else:
            major = _major(smoke.expected_value("cuda")) or _major(probe["versions"].get("cuda"))
            required = f"lib{family}.so.{major}" if major else None
    if required and required not in copies:
        pytest.fail(f"{required}: expected exactly one copy, found none", pytrace=False)
    if not copies:
        pytest.skip(f"no {family} library in the image" + (" (CPU variant)" if smoke.cpu_variant() else ""))
