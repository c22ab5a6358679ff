"""compile: `torch.compile` with the default Inductor backend really compiles and runs, and matches eager.

Inductor's CPU backend writes C++ and builds it with the system C++ compiler (OpenMP flags, Python's headers);
on a GPU, Triton builds a small C launcher with the system C compiler against `Python.h` and finds libcuda through
the dynamic loader cache. Images without these fail at the first compiled kernel, so the failure reason names
what is missing (compiler, headers, libcuda) instead of Inductor's traceback alone.

Runs in a child probe (`--child compile`): Inductor spawns compiler processes and a crash must not take the probe
down with it. The child starts with the probe (`start`), so that its cold compile overlaps the other sections:
Inductor's cold start is one chain (its vector-ISA dry compiles, the precompiled kernel header, then the kernels),
most of a runtime image's probe time, and the probe's other work yields the CPU to it (common.Probe.run). Inductor
runs as it is shipped: the probe patches nothing in torch (tests/unit/test_probe_standard.py).
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
import time

from probe.common import NO_TORCH, Probe, finish_child, start_child, stop_child, which

CPU_CHECKS = ("compile.toolchain", "compile.cpu_function", "compile.cpu_module", "compile.cpu_max_autotune")
GPU_CHECKS = ("compile.cuda_function", "compile.cuda_module")
DTYPES = ("float16", "float32", "float64")


CHILD_ARGS = ["--sections", "compile", "--child", "compile"]


def start(p: Probe):
    """Start the child probe at the probe's start: its cold Inductor work runs alongside the sections before this
    one."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        p.started["compile"] = start_child(CHILD_ARGS)
        p.yield_to_children = True


def run(p: Probe):
    torch = p.import_torch()
    started = p.started.pop("compile", None)
    if torch is None:
        if started is not None:
            stop_child(started)
        for name in CPU_CHECKS + GPU_CHECKS:
            p.check(name, "skipped", NO_TORCH)
        return
    res = finish_child(started or start_child(CHILD_ARGS), timeout=p.remaining(900))
    if res.get("error"):
        p.doc["compile"] = {"toolchain": toolchain()}
        for name in CPU_CHECKS + GPU_CHECKS:
            p.check(name, "failed", f"compile probe did not finish: {res['error']}")
        return
    p.doc["compile"] = res.get("compile", {})
    p.doc["checks"].extend(res.get("checks", []))


def toolchain() -> dict:
    """What Inductor and Triton need from the image, found the way they look for it."""
    include = sysconfig.get_paths().get("include") or ""
    # Inductor uses $CXX else g++; Triton uses $CC else cc/gcc/clang
    env_cxx, env_cc = os.environ.get("CXX"), os.environ.get("CC")
    cxx = _resolve(env_cxx) if env_cxx else which("g++")
    cc = _resolve(env_cc) if env_cc else (which("cc") or which("gcc") or which("clang"))
    return {
        "cxx": cxx,
        "cc": cc,
        "python_include": include,
        "python_h": os.path.isfile(os.path.join(include, "Python.h")),
        "libcuda_in_ldconfig": libcuda_in_cache(),
    }


def _resolve(cmd: str) -> str | None:
    """A compiler named by $CXX/$CC, when it exists (a path, or a name on PATH)."""
    if os.sep in cmd:
        return cmd if os.path.isfile(cmd) and os.access(cmd, os.X_OK) else None
    return which(cmd)


def libcuda_in_cache() -> bool | None:
    """Is libcuda.so.1 in the loader cache (`ldconfig -p`), where Triton looks for it? None when unknown."""
    ldconfig = which("ldconfig") or ("/sbin/ldconfig" if os.path.exists("/sbin/ldconfig") else None)
    if ldconfig is None:
        return None
    try:
        out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return "libcuda.so.1" in out


def missing(tc: dict, gpu: bool) -> list[str]:
    """Human names of what the toolchain lacks for CPU (and, with gpu, Triton) compilation."""
    out = []
    if not tc["cxx"]:
        out.append("C++ compiler (g++): Inductor's CPU backend builds C++")
    if gpu and not tc["cc"]:
        out.append("C compiler (cc/gcc): Triton builds its launcher")
    if not tc["python_h"]:
        out.append(f"Python headers ({tc['python_include']}/Python.h, the python3.X-dev package)")
    if gpu and tc["libcuda_in_ldconfig"] is False:
        out.append("libcuda.so.1 is not in the loader cache (ldconfig -p): Triton cannot find the driver")
    return out


def explain(exc: BaseException, tc: dict, gpu: bool) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0][:600] if text else type(exc).__name__
    lacks = missing(tc, gpu)
    return (f"missing {'; '.join(lacks)} -- " if lacks else "") + first


def child(p: Probe):
    """In the child probe: compile on CPU (and CUDA when a GPU is usable), compare with eager."""
    # no worker pool: set before torch is imported (Inductor reads it once, with its config)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    torch = p.import_torch()
    tc = toolchain()
    doc = p.doc.setdefault("compile", {})
    doc["toolchain"] = tc
    lacks = missing(tc, gpu=False)
    if lacks:
        p.check("compile.toolchain", "failed", "missing " + "; ".join(lacks), **tc)
    else:
        p.check("compile.toolchain", "passed", f"{tc['cxx']}, {tc['python_include']}/Python.h", **tc)
    _timed(p, "compile.cpu_function", lambda: _function(torch, "cpu"), tc, gpu=False)
    _timed(p, "compile.cpu_module", lambda: _module(torch, "cpu", mode=None), tc, gpu=False)
    _timed(p, "compile.cpu_max_autotune", lambda: _module(torch, "cpu", mode="max-autotune"), tc, gpu=False)
    usable, reason = p.gpu_state()
    if not usable:
        for name in GPU_CHECKS:
            p.check(name, "skipped", reason)
        return
    _timed(p, "compile.cuda_function", lambda: _function(torch, "cuda"), tc, gpu=True)
    _timed(p, "compile.cuda_module", lambda: _module(torch, "cuda", mode=None), tc, gpu=True)


def _timed(p: Probe, name, fn, tc, gpu):
    t0 = time.time()
    try:
        ok, reason, fig = fn()
    except Exception as exc:
        p.check(name, "failed", explain(exc, tc, gpu), seconds=round(time.time() - t0, 2))
        return
    fig["seconds"] = round(time.time() - t0, 2)
    p.check(name, "passed" if ok else "failed", reason, **fig)


def _reset(torch):
    torch._dynamo.reset()


def _function(torch, device):
    """torch.compile of a small pointwise+reduction function in float16/32/64 (PyTorch's release smoke test does
    the same), each result compared with eager. The three dtypes are one compiled graph (one kernel each, one
    compile and C++ build for all three: a third of the cold cost of compiling them apart), and the code Inductor
    generated for that very graph is the proof that it compiled."""
    def fn(x, y):
        return (x.sin() * y.cos() + x * y).sum(dim=-1) / (1 + x.abs().mean())

    def each_dtype(*pairs):
        return tuple(fn(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2))

    g = torch.Generator().manual_seed(0)
    inputs = []
    for name in DTYPES:
        dtype = getattr(torch, name)
        for _ in range(2):
            inputs.append(torch.randn(64, 33, generator=g).to(device=device, dtype=dtype))
    _reset(torch)
    got, codes = _run_and_get_code(torch, torch.compile(each_dtype), inputs)
    want = each_dtype(*inputs)
    worst = {}
    for i, name in enumerate(DTYPES):  # no zip(strict=): the probe runs on pythons before 3.10
        a, b = got[i], want[i]
        tol = 1e-2 if name == "float16" else 1e-5
        diff = float((a.float() - b.float()).abs().max())
        if a.dtype != b.dtype or not torch.allclose(a.float(), b.float(), rtol=tol, atol=tol):
            return False, f"{device} {name}: compiled result differs from eager (max abs diff {diff:.3g}, " \
                          f"dtype {a.dtype} vs {b.dtype})", {}
        worst[name] = diff
    kernels = _kernel_kind(codes)
    return True, f"{device} float16/32/64 match eager" + (f" ({kernels})" if kernels else ""), {
        "max_abs_diff": worst, "kernels": kernels}


def _run_and_get_code(torch, compiled, inputs):
    """(the compiled call's result, the code Inductor generated for it); the code is [] where torch has no
    run_and_get_code (the result is still compared)."""
    try:
        from torch._inductor.utils import run_and_get_code
    except ImportError:
        return compiled(*inputs), []
    return run_and_get_code(compiled, *inputs)


def _kernel_kind(codes) -> str:
    """What Inductor generated (C++ on CPU, Triton on CUDA): proof that it compiled."""
    text = "\n".join(codes)
    if "@triton.jit" in text:
        return "triton kernel"
    if "cpp_fused" in text or "extern \"C\"" in text or "CppCodeCache" in text or "cpp_pybinding" in text:
        return "C++ kernel"
    return ""


def _module(torch, device, mode):
    """A small CNN (conv, batch norm, pooling, linear) compiled with `mode`, compared with eager in eval mode."""
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    ).to(device).eval()
    x = torch.randn(4, 3, 16, 16, device=device)
    _reset(torch)
    with torch.no_grad():
        want = model(x)
        compiled = torch.compile(model, mode=mode) if mode else torch.compile(model)
        got = compiled(x)
    label = f"{device} CNN" + (f" mode={mode}" if mode else "")
    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-3, atol=1e-3):
        diff = float((got - want).abs().max()) if got.shape == want.shape else float("nan")
        return False, f"{label}: compiled output differs from eager (max abs diff {diff:.3g})", {}
    return True, f"{label} matches eager", {"max_abs_diff": float((got - want).abs().max()), "mode": mode}
