"""AMP: a few training steps under torch.amp.autocast (+ GradScaler on CUDA); bf16 on CPU."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the names only: pytest loads conftest itself
    from .conftest import CheckFn

pytestmark = pytest.mark.section("amp")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_amp_cuda(check: CheckFn, dtype: str) -> None:
    check(f"amp.cuda_{dtype}", gpu=True)


def test_amp_cpu_bf16(check: CheckFn) -> None:
    check("amp.cpu_bf16")
