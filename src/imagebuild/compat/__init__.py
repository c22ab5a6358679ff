"""Compatibility DATA (torch/CUDA/OS/transformer_engine tables) and their loaders; decisions live in resolve/."""

from imagebuild.compat.tables import (
    CudaInfo,
    PlatformInfo,
    PlatformWheels,
    Tables,
    TERelease,
    TorchRelease,
    TorchVariant,
    accel,
    arch_num,
    cuda_tag,
    load,
    load_from,
    vtuple,
)

__all__ = [
    "CudaInfo",
    "PlatformInfo",
    "PlatformWheels",
    "TERelease",
    "Tables",
    "TorchRelease",
    "TorchVariant",
    "accel",
    "arch_num",
    "cuda_tag",
    "load",
    "load_from",
    "vtuple",
]
