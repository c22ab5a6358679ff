"""torch.distributed: NCCL all_reduce over all GPUs (transport from NCCL_DEBUG=INFO); gloo on CPU hosts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("distributed")


def test_nccl_all_reduce(check: Callable[..., dict[str, Any]]) -> None:
    check("distributed.nccl", gpu=True)


def test_gloo_all_reduce(check: Callable[..., dict[str, Any]]) -> None:
    check("distributed.gloo")
