"""AMP: a few training steps under torch.amp.autocast (+ GradScaler on CUDA); bf16 on CPU."""

import pytest

pytestmark = pytest.mark.section("amp")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_amp_cuda(check, dtype):
    check(f"amp.cuda_{dtype}", gpu=True)


def test_amp_cpu_bf16(check):
    check("amp.cpu_bf16")
