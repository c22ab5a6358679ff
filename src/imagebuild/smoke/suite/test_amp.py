"""AMP: a few training steps under torch.amp.autocast (+ GradScaler on CUDA); bf16 on CPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("amp")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_amp_cuda(check: Callable[..., dict[str, Any]], dtype: str) -> None:
    check(f"amp.cuda_{dtype}", gpu=True)


def test_amp_cpu_bf16(check: Callable[..., dict[str, Any]]) -> None:
    check("amp.cpu_bf16")
