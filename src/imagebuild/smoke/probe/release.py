"""release: the checks of PyTorch's own release smoke test that apply to an image, written as ours.

CPU (every torch image): OpenMP available, the vectorised CPU ISA Inductor picks, conv2d and linalg (SVD) results,
numpy interop. CUDA builds: cuDNN runtime version == the version torch was compiled with, cuDNN and NCCL versions ==
the nvidia-cudnn / nvidia-nccl packages installed (these need the libraries, not a GPU). On a GPU: conv2d and SVD on
CUDA, a device-side assert surfaces as a Python exception (`torch._assert_async`), and on CUDA >= 12.6 a GPUDirect
Storage failure surfaces as an exception too. The last two run in a child probe (`--child release`): a device-side
assert leaves the CUDA context unusable for the rest of the process.
"""

from __future__ import annotations

import os
import platform
import tempfile
from typing import Any

from probe.common import NO_CUDA_TORCH, NO_TORCH, Probe, installed_version, run_child
from probe.versions import format_cudnn_version

CPU_CHECKS = ("release.openmp", "release.cpu_isa", "release.conv2d_cpu", "release.linalg_cpu", "release.numpy")
LIB_CHECKS = ("release.cudnn_compile_version", "release.cudnn_package", "release.nccl_package")
GPU_CHECKS = ("release.conv2d_cuda", "release.linalg_cuda", "release.cuda_errors", "release.gds_errors")
GDS_MIN_CUDA = (12, 6)


def run(p: Probe):
    torch = p.import_torch()
    if torch is None:
        for name in CPU_CHECKS + LIB_CHECKS + GPU_CHECKS:
            p.check(name, "skipped", NO_TORCH)
        return
    doc: dict[str, Any] = {}
    p.doc["release"] = doc
    _openmp(p, torch)
    _cpu_isa(p, torch, doc)
    _guard(p, "release.conv2d_cpu", lambda: _conv2d(torch, "cpu"))
    _guard(p, "release.linalg_cpu", lambda: _svd(torch, "cpu"))
    _guard(p, "release.numpy", lambda: _numpy(torch))
    if not getattr(torch.version, "cuda", None):
        for name in LIB_CHECKS + GPU_CHECKS:
            p.check(name, "skipped", NO_CUDA_TORCH)
        return
    _library_versions(p, torch, doc)
    usable, reason = p.gpu_state()
    if not usable:
        for name in GPU_CHECKS:
            p.check(name, "skipped", reason)
        return
    _guard(p, "release.conv2d_cuda", lambda: _conv2d(torch, "cuda"))
    _guard(p, "release.linalg_cuda", lambda: _svd(torch, "cuda"))
    res = run_child(["--sections", "release", "--child", "release"], timeout=p.remaining(300))
    if res.get("error"):
        for name in ("release.cuda_errors", "release.gds_errors"):
            p.check(name, "failed", f"error-path probe did not finish: {res['error']}")
        return
    p.doc["checks"].extend(res.get("checks", []))


def _guard(p: Probe, name, fn):
    try:
        ok, reason, fig = fn()
    except Exception as exc:
        p.check(name, "failed", f"{type(exc).__name__}: {exc}"[:1000])
        return
    p.check(name, "passed" if ok else "failed", reason, **fig)


def _openmp(p: Probe, torch):
    ok = bool(torch.backends.openmp.is_available())
    threads = torch.get_num_threads()
    p.check("release.openmp", "passed" if ok else "failed",
            f"OpenMP available, {threads} threads" if ok else "torch.backends.openmp.is_available() is False",
            threads=threads)


def _cpu_isa(p: Probe, torch, doc):
    """The vectorised ISA Inductor's C++ backend would use. Inductor finds it by compiling a test program, so an
    empty answer on x86_64 means no working C++ compiler (or a CPU without AVX2)."""
    machine = platform.machine()
    try:
        try:
            from torch._inductor.cpu_vec_isa import pick_vec_isa
        except ImportError:  # torch < 2.5
            from torch._inductor.codecache import pick_vec_isa
        isa = pick_vec_isa()
    except Exception as exc:
        from probe.torch_compile import explain, toolchain

        p.check("release.cpu_isa", "failed", "pick_vec_isa: " + explain(exc, toolchain(), gpu=False), machine=machine)
        return
    name = str(isa) if isa else ""
    doc["cpu_isa"] = name
    if name:
        p.check("release.cpu_isa", "passed", f"{name} on {machine}", isa=name, machine=machine)
    elif machine in ("x86_64", "AMD64", "aarch64", "arm64"):
        from probe.torch_compile import missing, toolchain

        lacks = missing(toolchain(), gpu=False)
        why = ("missing " + "; ".join(lacks)) if lacks else "the CPU has no vector ISA Inductor supports"
        p.check("release.cpu_isa", "failed", f"no vectorised ISA picked on {machine}: {why}", machine=machine)
    else:
        p.check("release.cpu_isa", "skipped", f"Inductor has no vectorised ISA for {machine}", machine=machine)


def _conv2d(torch, device):
    """conv2d against the same convolution written as unfold + matmul (float64 reference)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 12, 12, generator=g, dtype=torch.float64)
    w = torch.randn(5, 3, 3, 3, generator=g, dtype=torch.float64)
    b = torch.randn(5, generator=g, dtype=torch.float64)
    cols = torch.nn.functional.unfold(x, 3, padding=1)  # (2, 27, 144)
    ref = (w.view(5, -1) @ cols).view(2, 5, 12, 12) + b.view(1, 5, 1, 1)
    worst = {}
    for name, tol in (("float32", 1e-4), ("float64", 1e-10)):
        dtype = getattr(torch, name)
        got = torch.nn.functional.conv2d(x.to(device, dtype), w.to(device, dtype), b.to(device, dtype), padding=1)
        diff = float((got.double().cpu() - ref).abs().max())
        worst[name] = diff
        if not diff <= tol * max(1.0, float(ref.abs().max())):
            return False, f"{device} conv2d {name} differs from the reference by {diff:.3g}", {"max_abs_diff": worst}
    return True, f"{device} conv2d float32/float64 match an unfold+matmul reference", {"max_abs_diff": worst}


def _svd(torch, device):
    """linalg.svd: U diag(S) Vh reconstructs A, U is orthonormal, S sorted descending."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(24, 16, generator=g, dtype=torch.float64).to(device)
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    recon = float((u @ torch.diag(s) @ vh - a).abs().max())
    ortho = float((u.T @ u - torch.eye(16, dtype=a.dtype, device=device)).abs().max())
    ordered = bool((s[:-1] >= s[1:]).all())
    fig = {"reconstruction_error": recon, "orthogonality_error": ortho}
    if recon > 1e-10 or ortho > 1e-10 or not ordered:
        return False, (f"{device} svd: reconstruction error {recon:.3g}, orthogonality error {ortho:.3g}, "
                       f"singular values {'sorted' if ordered else 'NOT sorted'}"), fig
    return True, f"{device} svd reconstructs A (error {recon:.1e})", fig


def _numpy(torch):
    try:
        import numpy as np
    except ImportError:
        return False, "numpy is not installed: torch.from_numpy / Tensor.numpy cannot work", {}
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = torch.from_numpy(arr)
    arr[0, 0] = 42.0  # from_numpy shares memory
    back = (t * 2).numpy()
    ok = float(t[0, 0]) == 42.0 and back.dtype == np.float32 and float(back[2, 3]) == 22.0
    ok = ok and torch.tensor(np.float64(1.5)).dtype == torch.float64
    fig = {"numpy": np.__version__}
    if not ok:
        return False, "numpy interop broken (shared memory, dtype or values)", fig
    return True, f"numpy {np.__version__}: from_numpy shares memory, .numpy() round-trips", fig


def _library_versions(p: Probe, torch, doc):
    """cuDNN/NCCL as loaded vs compiled-in vs the nvidia-* packages. Needs the libraries, not a GPU."""
    major = torch.version.cuda.split(".")[0]
    try:
        runtime = int(torch.backends.cudnn.version())
        compiled = torch._C._cudnn.getCompileVersion()  # (major, minor, patch)
    except Exception as exc:
        p.check("release.cudnn_compile_version", "failed", f"cuDNN does not load: {type(exc).__name__}: {exc}"[:800])
        p.check("release.cudnn_package", "skipped", "cuDNN does not load")
        runtime = None
    else:
        rt = format_cudnn_version(runtime) or str(runtime)
        ct = ".".join(str(x) for x in compiled)
        doc.update(cudnn_runtime=rt, cudnn_compiled=ct)
        # torch's own rule: same major, runtime not older than the compile-time version
        ok = rt.split(".")[0] == ct.split(".")[0] and _vt(rt) >= _vt(ct)
        p.check("release.cudnn_compile_version", "passed" if ok else "failed",
                f"cuDNN runtime {rt}, compiled with {ct}", runtime=rt, compiled=ct)
        dist, pkg = installed_version(f"nvidia-cudnn-cu{major}", "nvidia-cudnn")
        if pkg is None:
            p.check("release.cudnn_package", "failed", f"no nvidia-cudnn-cu{major} package: where does cuDNN {rt} "
                    "come from?", runtime=rt)
        else:
            same = _vt(pkg)[:3] == _vt(rt)[:3]
            p.check("release.cudnn_package", "passed" if same else "failed",
                    f"cuDNN {rt} loaded, {dist} {pkg} installed", runtime=rt, package=pkg)
    try:
        nv = torch.cuda.nccl.version()
        nccl = ".".join(str(x) for x in nv) if isinstance(nv, tuple) else str(nv)
    except Exception as exc:
        p.check("release.nccl_package", "failed", f"NCCL does not load: {type(exc).__name__}: {exc}"[:800])
        return
    doc["nccl_runtime"] = nccl
    dist, pkg = installed_version(f"nvidia-nccl-cu{major}", "nvidia-nccl")
    if pkg is None:
        p.check("release.nccl_package", "failed", f"no nvidia-nccl-cu{major} package: where does NCCL {nccl} "
                "come from?", runtime=nccl)
        return
    same = _vt(pkg)[:3] == _vt(nccl)[:3]
    p.check("release.nccl_package", "passed" if same else "failed", f"NCCL {nccl} loaded, {dist} {pkg} installed",
            runtime=nccl, package=pkg)


def _vt(v: str) -> tuple:
    out = []
    for part in v.split("+")[0].split("."):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def child(p: Probe):
    """In the child probe, on a GPU: GDS error path (CUDA >= 12.6), then the device-side assert (last: it poisons
    the CUDA context)."""
    torch = p.import_torch()
    cuda = _vt(torch.version.cuda or "0")
    if cuda[:2] < GDS_MIN_CUDA:
        p.check("release.gds_errors", "skipped", f"GPUDirect Storage bindings need CUDA >= 12.6 (torch has "
                f"{torch.version.cuda})")
    else:
        _guard(p, "release.gds_errors", lambda: _gds_error(torch))
    _guard(p, "release.cuda_errors", lambda: _device_assert(torch))


def _gds_error(torch):
    """Registering a file that cuFile cannot use (tmpfs/overlay, no nvidia-fs) must raise RuntimeError, not crash."""
    gds = getattr(torch.cuda, "gds", None)
    if gds is None or not hasattr(gds, "GdsFile"):
        return False, "torch.cuda.gds.GdsFile is missing from a CUDA >= 12.6 build", {}
    fd, path = tempfile.mkstemp(prefix="ibgds-")
    os.close(fd)
    try:
        try:
            f = gds.GdsFile(path, os.O_CREAT | os.O_RDWR)
        except RuntimeError as exc:
            return True, f"GDS failure surfaced as RuntimeError: {str(exc)[:200]}", {"error": str(exc)[:300]}
        # GDS works here (nvidia-fs present, compatible file system): the error path is not reachable, say so
        try:
            t = torch.ones(1024, device="cuda")
            f.save_storage(t.untyped_storage(), offset=0)
        finally:
            del f
        return True, "GDS file registration succeeded (GDS usable on this host)", {"gds_usable": True}
    finally:
        os.unlink(path)


def _device_assert(torch):
    t0 = torch.tensor(0, device="cuda")
    try:
        torch._assert_async(t0)
        torch.cuda.synchronize()
    except RuntimeError as exc:
        text = str(exc)
        if "device-side assert" in text or "CUDA error" in text:
            return True, "device-side assert surfaced as RuntimeError", {"error": text.splitlines()[0][:300]}
        return False, f"RuntimeError without the CUDA error text: {text[:300]}", {}
    return False, "torch._assert_async(tensor(0)) on CUDA raised nothing", {}
