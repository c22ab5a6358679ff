"""The programs the hpc section (probe/hpcruntime.py) runs, each in a child python of the hpc container: what a
job on a cluster does first (import torch, find its compile caches, compile, touch the GPU, import TE). Standard
library only: these are strings."""

from __future__ import annotations

TORCH_IMPORT = "import torch; x = torch.ones(2) + 1; assert float(x.sum()) == 4.0; print(torch.__version__)"
# Inductor's vector-ISA checks (a dry compile and a dlopen per ISA the CPU has: half a cold compile's time) are
# skipped here: a failing one only turns vectorisation off, never fails a compile, so they cannot change this
# check's outcome; they run (and are judged, release.cpu_isa) in the main container
COMPILE = ("import os\nos.environ.setdefault('TORCHINDUCTOR_VEC_ISA_OK', '0')\n"
           "import torch\nf = lambda x: torch.sin(x) * 2 + x.cos()\nx = torch.randn(64)\n"
           "assert torch.allclose(torch.compile(f)(x), f(x), atol=1e-5), 'compiled result differs from eager'\n"
           "print('ok')\n")
CACHES = """
import json, os
out = {}
try:
    from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_dir
    out["inductor"] = inductor_dir()
except Exception as exc:
    try:
        from torch._inductor.utils import cache_dir as inductor_dir
        out["inductor"] = inductor_dir()
    except Exception as exc2:
        out["inductor_error"] = f"{type(exc2).__name__}: {exc2}"
try:
    from triton.runtime.cache import default_cache_dir
    out["triton"] = os.environ.get("TRITON_CACHE_DIR") or default_cache_dir()
except Exception as exc:
    out["triton_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""
CUDA = """
import sys, torch
if not torch.version.cuda or not torch.cuda.is_available():
    print("NOCUDA" if not torch.version.cuda else "NOGPU"); sys.exit(0)
x = torch.ones(4, device="cuda")
assert float((x * 2).sum()) == 8.0
print("ok", torch.cuda.get_device_name(0))
"""
TE_IMPORT = "import transformer_engine, transformer_engine.pytorch as te; print(transformer_engine.__version__)"
