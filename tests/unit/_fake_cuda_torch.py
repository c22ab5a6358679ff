"""THE fake CUDA torch: a `torch` module object that reports usable CUDA devices, for the probe's GPU-only branches
(tests/unit/test_probe_gpu.py, test_probe_gpu_branches.py) on a machine without a GPU.

Every name it has is a name of torch's own API as the probe reads it (API below; tests/unit/test_probe_gpu.py checks
each against the real CPU torch, the device properties against torch's `_CudaDeviceProperties` stub): a fake that
answered under a name torch does not have would let a probe bug through. get_device_properties(i) returns an object
with those attribute names only, read-only -- in particular no `doc`: gpu.py once rebound the probe object `p` to it
in its device loop and crashed writing p.doc on the first real GPU.

The math is a model, not a GPU: a Tensor carries one number (`value`: its sum or norm; NaN for a broken kernel) and,
after a float32 matmul, the error of that matmul against float64 (torch._fake.tf32_err while the TF32 flags are on,
torch._fake.ieee_err otherwise; a test may change either).
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass

PROPERTIES = ("name", "major", "minor", "total_memory", "multi_processor_count", "uuid", "L2_cache_size",
              "is_integrated", "is_multi_gpu_board", "max_threads_per_multi_processor", "warp_size")
# torch's attributes the fake has (dotted, under `torch`): each exists in the real torch API (test_probe_gpu.py)
API = ("__version__", "version.cuda", "version.git_version", "cuda.is_available", "cuda.device_count",
       "cuda.get_device_properties", "cuda.get_device_capability", "cuda.get_device_name", "cuda.get_arch_list",
       "cuda.current_device", "cuda.set_device", "cuda.synchronize", "cuda.empty_cache", "cuda.nccl.version",
       "cuda.gds.GdsFile", "backends.cuda.matmul.allow_tf32", "backends.cuda.matmul.fp32_precision",
       "backends.cudnn.allow_tf32", "backends.cudnn.fp32_precision", "backends.cudnn.conv.fp32_precision",
       "backends.cudnn.rnn.fp32_precision", "backends.cudnn.version", "backends.fp32_precision",
       "backends.openmp.is_available", "get_float32_matmul_precision", "get_num_threads", "manual_seed", "device",
       "Generator", "randn", "ones", "tensor", "isfinite", "_assert_async", "float16", "bfloat16", "float32", "float64")
# only in CUDA builds of torch (the CPU wheel's python source names them: test_probe_gpu.py checks that instead)
CUDA_BUILD_API = ("_C._cuda_getArchFlags", "_C._cudnn.getCompileVersion")
ARCH_FLAGS = "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"  # torch 2.13 cu128 wheels (compat/data/torch.yaml)
TF32_ERR, IEEE_ERR = 1e-3, 1e-7  # relative error of a 4096^2 float32 matmul vs float64, each way


@dataclass(frozen=True)
class GPU:
    name: str
    capability: tuple[int, int]
    total_memory: int
    multi_processor_count: int
    L2_cache_size: int = 50 * 2**20


H200 = GPU("NVIDIA H200", (9, 0), 150_754_820_096, 132)
H100 = GPU("NVIDIA H100 80GB HBM3", (9, 0), 85_045_231_616, 132)
L4 = GPU("NVIDIA L4", (8, 9), 23_580_639_232, 58, 48 * 2**20)
A100 = GPU("NVIDIA A100-SXM4-80GB", (8, 0), 85_097_971_712, 108, 40 * 2**20)
H200_MIG = GPU("NVIDIA H200 MIG 1g.18gb", (9, 0), 17_985_175_552, 16)


class DeviceProperties:
    """torch.cuda.get_device_properties(i): torch._C._CudaDeviceProperties's attribute names, read-only."""

    __slots__ = PROPERTIES

    def __init__(self, gpu: GPU, index: int) -> None:
        values = {"name": gpu.name, "major": gpu.capability[0], "minor": gpu.capability[1],
                  "total_memory": gpu.total_memory, "multi_processor_count": gpu.multi_processor_count,
                  "uuid": f"GPU-00000000-0000-0000-0000-{index:012d}", "L2_cache_size": gpu.L2_cache_size,
                  "is_integrated": 0, "is_multi_gpu_board": 0, "max_threads_per_multi_processor": 2048,
                  "warp_size": 32}
        for key in PROPERTIES:
            object.__setattr__(self, key, values[key])

    def __setattr__(self, key, value):
        raise AttributeError(f"readonly attribute {key!r}")


class Tensor:
    """One number standing for a tensor (see the module docstring); `err`: a matmul's error vs float64."""

    def __init__(self, torch, value=1.0, dtype="torch.float32", err=0.0, grad=None):
        self.torch, self.value, self.dtype, self.err, self.grad = torch, value, dtype, err, grad

    def _new(self, value=None, dtype=None, err=None):
        return Tensor(self.torch, self.value if value is None else value, dtype or self.dtype,
                      self.err if err is None else err)

    def __matmul__(self, other):
        if self.dtype == "torch.float64":
            return self._new(err=0.0)
        fake = self.torch._fake
        return self._new(err=fake.tf32_err if fake.tf32_on() else fake.ieee_err)

    def __sub__(self, other):  # (c - ref): what is left is c's error
        return self._new(value=abs(self.err - other.err))

    def __truediv__(self, other):
        return self._new(value=self.value / float(other))

    def __mul__(self, k):
        return self._new(value=self.value * k)

    def __float__(self):
        return float(self.value)

    def double(self):
        return self._new(dtype="torch.float64")

    def float(self):
        return self._new(dtype="torch.float32")

    def norm(self):
        return self._new()

    def pow(self, k):
        return self._new(value=self.value ** k)

    def mean(self):
        return self._new()

    def sum(self):
        return self._new()

    def all(self):
        return self._new()

    def backward(self):
        pass

    def item(self):
        return self.value


def fake_cuda_torch(devices=(H200,), cuda="12.8", arch_flags=ARCH_FLAGS, *, tf32=True, cudnn=91002,
                    cudnn_compiled=(9, 10, 2), nccl=(2, 27, 5), device_assert=True):
    """A torch built for CUDA `cuda` that sees `devices` (GPU rows; none: a CUDA build on a host without a GPU).
    `tf32`: the image's TF32 policy at import; `device_assert`: torch._assert_async(tensor(0)) then synchronize()
    raises the CUDA error (False: a build where it raises nothing)."""
    torch = types.ModuleType("torch")
    props = [DeviceProperties(gpu, i) for i, gpu in enumerate(devices)]
    pending: list[Exception] = []

    def properties(device=None):
        index = device if isinstance(device, int) else int(str(device or "cuda:0").partition(":")[2] or 0)
        if not 0 <= index < len(props):
            raise AssertionError("Invalid device id")  # what torch raises
        return props[index]

    def synchronize(device=None):
        if pending:
            raise pending.pop()

    def assert_async(t, *msg):
        if device_assert and not t.value:
            pending.append(RuntimeError("CUDA error: device-side assert triggered\nCUDA kernel errors might be "
                                        "asynchronously reported at some other API call"))

    def gds_file(filename, flags):  # cuFile on tmpfs/overlay without nvidia-fs: torch raises RuntimeError
        raise RuntimeError(f"cuFileHandleRegister failed for {filename}: 5030 (cuFile internal error)")

    matmul = types.SimpleNamespace(allow_tf32=tf32, fp32_precision="tf32" if tf32 else "ieee")
    precision = "tf32" if tf32 else "ieee"
    torch.__version__ = f"2.13.0+cu{cuda.replace('.', '')}" if cuda else "2.13.0+cpu"
    torch.version = types.SimpleNamespace(cuda=cuda, git_version="0" * 40)
    torch._C = types.SimpleNamespace(_cuda_getArchFlags=lambda: arch_flags,
                                     _cudnn=types.SimpleNamespace(getCompileVersion=lambda: cudnn_compiled))
    torch.cuda = types.SimpleNamespace(
        is_available=lambda: bool(props), device_count=lambda: len(props), get_device_properties=properties,
        get_device_capability=lambda device=None: (properties(device).major, properties(device).minor),
        get_device_name=lambda device=None: properties(device).name,
        get_arch_list=lambda: arch_flags.split() if arch_flags else [],
        current_device=lambda: 0, set_device=lambda device: None, synchronize=synchronize, empty_cache=lambda: None,
        nccl=types.SimpleNamespace(version=lambda: nccl), gds=types.SimpleNamespace(GdsFile=gds_file))
    torch.backends = types.SimpleNamespace(
        cuda=types.SimpleNamespace(matmul=matmul),
        cudnn=types.SimpleNamespace(allow_tf32=tf32, fp32_precision=precision, version=lambda: cudnn,
                                    conv=types.SimpleNamespace(fp32_precision=precision),
                                    rnn=types.SimpleNamespace(fp32_precision=precision)),
        fp32_precision="none", openmp=types.SimpleNamespace(is_available=lambda: True))
    torch.get_float32_matmul_precision = lambda: "high" if matmul.allow_tf32 else "highest"
    torch.get_num_threads = lambda: 16
    torch.manual_seed = lambda seed: None
    torch.device = lambda kind, index=None: kind if index is None else f"{kind}:{index}"
    torch.Generator = lambda device=None: types.SimpleNamespace(manual_seed=lambda seed: None)
    torch.float16, torch.bfloat16, torch.float32, torch.float64 = (f"torch.{n}" for n in
                                                                    ("float16", "bfloat16", "float32", "float64"))

    def randn(*size, device=None, dtype=None, generator=None, requires_grad=False):
        return Tensor(torch, 1.0, dtype or "torch.float32", grad=Tensor(torch) if requires_grad else None)

    torch.randn = randn
    torch.ones = lambda *size, device=None, dtype=None: Tensor(torch, float(math.prod(size)), dtype or "torch.float32")
    torch.tensor = lambda value, device=None, dtype=None: Tensor(torch, value)
    torch.isfinite = lambda t: Tensor(torch, math.isfinite(t.value), "torch.bool")
    torch._assert_async = assert_async
    # the test's handle on the model (not a torch name): are the TF32 flags now set on, and a matmul's error each way
    torch._fake = types.SimpleNamespace(tf32_err=TF32_ERR, ieee_err=IEEE_ERR, tf32_on=lambda: matmul.fp32_precision
                                        == "tf32" or (matmul.fp32_precision == "none" and matmul.allow_tf32))
    return torch
