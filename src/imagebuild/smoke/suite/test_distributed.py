"""torch.distributed: NCCL all_reduce over all GPUs (transport from NCCL_DEBUG=INFO); gloo on CPU hosts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the names only: pytest loads conftest itself
    from .conftest import CheckFn

pytestmark = pytest.mark.section("distributed")


def test_nccl_all_reduce(check: CheckFn) -> None:
    check("distributed.nccl", gpu=True)


def test_gloo_all_reduce(check: CheckFn) -> None:
    check("distributed.gloo")
