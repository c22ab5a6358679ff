"""dev flavor: a torch C++ extension builds and runs, nvcc compiles (and on a GPU runs) a kernel, JupyterLab
answers with its token only, sshd's config passes `sshd -t` with PasswordAuthentication no (the last two:
services.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

from probe.common import NO_TORCH, Probe, rmtree, which
from probe.services import Jupyter, sshd_check


def run(p: Probe):
    p.doc["dev"] = {}
    jup = Jupyter()
    jup.start()  # boots while the compilers run
    try:
        _cpp_extension(p)
        _nvcc(p)
        res = jup.check(timeout=p.remaining(90))
    finally:
        jup.stop()
    p.doc["dev"]["jupyter"] = res
    p.check("dev.jupyter", res["status"], res["reason"], **res.get("figures", {}))
    res = sshd_check()
    p.doc["dev"]["sshd"] = res
    p.check("dev.sshd", res["status"], res["reason"], **res.get("figures", {}))


def _cpp_extension(p: Probe):
    torch = p.import_torch()
    if torch is None:
        p.check("dev.cpp_extension", "failed", NO_TORCH)
        return
    t0 = time.time()
    build = tempfile.mkdtemp(prefix="ibprobe-ext-")
    try:
        from torch.utils import cpp_extension

        # Python.h + ATen + the op registry: proves compiler, headers (python3-dev) and libtorch linking in ~7 s
        # on 2 cores, where load_inline's <torch/extension.h> takes ~35 s
        src = os.path.join(build, "ibprobe_ext.cpp")
        with open(src, "w") as fh:
            fh.write(_CPP_EXT_SRC)
        cpp_extension.load(name="ibprobe_ext", sources=[src], build_directory=build, is_python_module=False,
                           extra_cflags=["-O0"], verbose=False)
        x = torch.arange(4, dtype=torch.float32)
        ok = torch.equal(torch.ops.ibprobe.add_one(x), x + 1)
        fig = {"seconds": round(time.time() - t0, 2), "compiler": os.environ.get("CXX", "c++")}
        p.check("dev.cpp_extension", "passed" if ok else "failed",
                   "torch.utils.cpp_extension built an op and torch.ops called it" if ok
                   else "extension returned a wrong result", **fig)
    except Exception as exc:
        p.check("dev.cpp_extension", "failed", f"{type(exc).__name__}: {_compiler_error(str(exc))}",
                   seconds=round(time.time() - t0, 2), log_tail=str(exc)[-3000:])
    finally:
        rmtree(build)


def _nvcc(p: Probe):
    torch = p.import_torch()
    cuda = getattr(getattr(torch, "version", None), "cuda", None) if torch else None
    nvcc = _find_nvcc()
    p.doc["dev"]["nvcc"] = nvcc
    if not cuda and not nvcc:
        p.check("dev.nvcc", "skipped", "CPU variant: no CUDA toolchain expected")
        return
    if not nvcc:
        p.check("dev.nvcc", "failed", "nvcc not found (PATH, /usr/local/cuda/bin, site-packages nvidia/*/bin)")
        return
    usable, reason = p.gpu_state()
    work = tempfile.mkdtemp(prefix="ibprobe-nvcc-")
    try:
        src = os.path.join(work, "k.cu")
        with open(src, "w") as fh:
            fh.write(_CU_SRC)
        exe = os.path.join(work, "k")
        cmd = [nvcc, "-O2", "-o", exe, src] + (["-arch=native"] if usable else [])
        t0 = time.time()
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=p.remaining(180))
        fig = {"nvcc": nvcc, "compile_seconds": round(time.time() - t0, 2)}
        if out.returncode != 0 and usable:  # old nvcc without -arch=native
            out = subprocess.run(cmd[:-1], capture_output=True, text=True, timeout=p.remaining(180))
        if out.returncode != 0:
            p.check("dev.nvcc", "failed", f"nvcc failed: {_compiler_error(out.stderr or out.stdout)}",
                       log_tail=(out.stderr or out.stdout)[-3000:], **fig)
            return
        if not usable:
            p.check("dev.nvcc", "passed", f"compiled; not run: {reason}", ran=False, **fig)
            return
        run = subprocess.run([exe], capture_output=True, text=True, timeout=60)
        fig["ran"] = True
        if run.returncode == 0 and run.stdout.strip() == "ok 1024":
            p.check("dev.nvcc", "passed", "compiled and ran a kernel", **fig)
        else:
            p.check("dev.nvcc", "failed", f"kernel run: rc={run.returncode} "
                       f"{(run.stdout + run.stderr).strip()[-800:]}", **fig)
    except (OSError, subprocess.SubprocessError) as exc:
        p.check("dev.nvcc", "failed", f"{type(exc).__name__}: {exc}")
    finally:
        rmtree(work)


_CPP_EXT_SRC = r"""
#include <Python.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>
static at::Tensor add_one(const at::Tensor& x) { return x.add(1); }
TORCH_LIBRARY(ibprobe, m) { m.def("add_one", &add_one); }
"""

_CU_SRC = r"""
#include <cstdio>
__global__ void fill(int *out, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = 1; }
int main() {
  const int n = 1024; int *d = nullptr; int h[n];
  if (cudaMalloc(&d, n * sizeof(int)) != cudaSuccess) { printf("cudaMalloc failed\n"); return 2; }
  fill<<<(n + 255) / 256, 256>>>(d, n);
  if (cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess) { printf("copy failed\n"); return 3; }
  int s = 0; for (int i = 0; i < n; ++i) s += h[i];
  printf("ok %d\n", s); return 0;
}
"""


def _compiler_error(text: str) -> str:
    """The lines that say what went wrong in a compiler/ninja log (`fatal error: Python.h: No such file`)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errs = [ln for ln in lines if re.search(r"\berror:", ln, re.I)] or [
        ln for ln in lines if re.search(r"\berror\b", ln, re.I) and " -c " not in ln]
    picked = errs[:3] or lines[-3:]
    return " | ".join(picked)[:1000]


def _find_nvcc():
    p = which("nvcc")
    if p:
        return p
    for c in ("/usr/local/cuda/bin/nvcc",):
        if os.path.isfile(c):
            return c
    for d in [p for p in sys.path if p.endswith("-packages")]:
        nv = os.path.join(d, "nvidia")
        try:
            subs = sorted(os.listdir(nv))
        except OSError:
            continue
        for s in subs:
            c = os.path.join(nv, s, "bin", "nvcc")
            if os.path.isfile(c):
                return c
    return None
