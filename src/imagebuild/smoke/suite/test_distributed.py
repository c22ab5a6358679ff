"""torch.distributed: NCCL all_reduce over all GPUs (transport from NCCL_DEBUG=INFO); gloo on CPU hosts."""

import pytest

pytestmark = pytest.mark.section("distributed")


def test_nccl_all_reduce(check):
    check("distributed.nccl", gpu=True)


def test_gloo_all_reduce(check):
    check("distributed.gloo")
