"""The probe's usable-GPU branches other than the gpu section's (test_probe_gpu.py), run without a GPU: the fake CUDA
torch (_fake_cuda_torch.py) as `p.torch` with the GPU state usable, and where a branch does real CUDA work the
smallest helper replaced (the timing, the training run, the child probe). What each asserts is the decision the
branch makes (passed / failed / skipped, its reason and figures); what only a GPU proves is in docs/testing.md."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest
from _fake_cuda_torch import A100, H200, IEEE_ERR, L4, TF32_ERR, fake_cuda_torch

from imagebuild.smoke import probe as P
from imagebuild.smoke.probe import (
    amp,
    dev,
    distributed,
    hpccode,
    hpcruntime,
    pack,
    perf,
    release,
    te,
    tf32,
    torch_compile,
    versions,
)

SMOKE_DIR = pack.PACKAGE_DIR.parent  # holds probe/: imported as the zipapp imports it
UNIT_DIR = Path(__file__).resolve().parent  # holds _fake_cuda_torch.py, for a child python


def _probe(section, torch=None):
    p = P.Probe([section])
    p.torch = torch if torch is not None else fake_cuda_torch()
    p._gpu = (True, "")
    return p


def _checks(p):
    return {c["name"]: c for c in p.doc["checks"]}


# --- tf32: speed-up and accuracy, TF32 on vs off ------------------------------------------------------------------

@pytest.mark.parametrize("image_tf32, ms, tf32_err, speedup, accuracy", [
    (True, (3.0, 1.0), TF32_ERR, "passed", "passed"),
    (False, (3.0, 1.0), TF32_ERR, "passed", "passed"),
    (True, (1.1, 1.0), TF32_ERR, "failed", "passed"),  # TF32 not faster: the flag did not reach cuBLAS
    (True, (3.0, 1.0), 5e-2, "passed", "failed"),  # TF32 error too large
])
def test_tf32_speedup_and_accuracy(monkeypatch, image_tf32, ms, tf32_err, speedup, accuracy):
    torch = fake_cuda_torch(tf32=image_tf32)
    torch._fake.tf32_err = tf32_err
    timed = []

    def time_cuda(torch_, fn, warmup=3, reps=10):
        fn()
        timed.append(torch._fake.tf32_on())
        return (ms[1] if timed[-1] else ms[0]) / 1e3

    monkeypatch.setattr(tf32, "time_cuda", time_cuda)
    p = _probe("tf32", torch)
    tf32.run(p)
    c = _checks(p)
    assert timed == [False, True]  # IEEE timed first, then TF32
    assert c["tf32.speedup"]["status"] == speedup and c["tf32.accuracy"]["status"] == accuracy
    fig = p.doc["tf32"]["gpu"]
    assert fig["speedup"] == round(ms[0] / ms[1], 2) and fig["rel_err_tf32"] == tf32_err
    assert fig["rel_err_ieee"] == IEEE_ERR and fig["default_is_tf32"] is image_tf32  # the image's policy, measured
    assert torch.backends.cuda.matmul.fp32_precision == ("tf32" if image_tf32 else "ieee")  # restored
    if speedup == "failed":
        assert c["tf32.speedup"]["reason"] == "TF32 only 1.10x the IEEE fp32 speed (want >= 1.3x)"
    if accuracy == "failed":
        assert c["tf32.accuracy"]["reason"].startswith("relative error vs float64: tf32 5.00e-02 (want < 5e-3)")


# --- amp: CUDA fp16 (GradScaler) and bf16 --------------------------------------------------------------------------

def test_amp_trains_on_cuda_in_fp16_and_bf16(monkeypatch):
    calls = []

    def train(torch, device, dtype_name, use_scaler, steps=12):
        calls.append((device, dtype_name, use_scaler))
        bad = (device, dtype_name) == ("cuda", "bf16")
        return {"status": "failed" if bad else "passed", "reason": "non-finite loss" if bad else "ok",
                "figures": {"dtype": dtype_name}}

    monkeypatch.setattr(amp, "_amp_train", train)
    p = _probe("amp")
    amp.run(p)
    c = _checks(p)
    assert calls == [("cuda", "fp16", True), ("cuda", "bf16", True), ("cpu", "bf16", False)]
    assert c["amp.cuda_fp16"]["status"] == "passed" and p.doc["amp"]["cuda_fp16"]["figures"] == {"dtype": "fp16"}
    assert c["amp.cuda_bf16"]["status"] == "failed" and c["amp.cuda_bf16"]["reason"] == "non-finite loss"


def test_amp_gradscaler_path_runs_on_the_cpu_torch(torch_python):
    """The GradScaler lines (scale, step, update, the scale's check) run only for CUDA in the probe; here the same
    function runs them with the real torch, on the CPU."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import torch; from probe import amp; "
            "print(json.dumps(amp._amp_train(torch, 'cpu', 'fp16', use_scaler=True)))")
    out = subprocess.run([torch_python, "-c", code, str(SMOKE_DIR)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["status"] == "passed", res
    assert res["figures"]["autocast_dtype"] == "torch.float16" and res["figures"]["scaler_scale"] >= 1.0
    assert res["reason"].endswith(f"scale {res['figures']['scaler_scale']:g}")


# --- perf: GEMM TFLOP/s and NCCL bus bandwidth --------------------------------------------------------------------

@pytest.mark.parametrize("devices, nccl_busbw, run_dist_bw, allreduce", [
    ([H200], None, None, ("skipped", "needs 2+ GPUs")),
    ([H200, H200], 361.2, None, ("passed", "NCCL all_reduce bus bandwidth 361.2 GB/s")),  # from the distributed run
    ([H200, H200], None, 350.0, ("passed", "NCCL all_reduce bus bandwidth 350.0 GB/s")),
    ([H200, H200], None, None, ("failed", "nccl all_reduce timed out after 240 s")),
])
def test_perf_gemm_and_allreduce(monkeypatch, devices, nccl_busbw, run_dist_bw, allreduce):
    torch = fake_cuda_torch(devices, tf32=True)
    secs = {("torch.float32", False): 0.010, ("torch.float32", True): 0.004, ("torch.bfloat16", False): 0.002}
    monkeypatch.setattr(perf, "time_cuda", lambda t, fn, warmup, reps: secs[(fn().dtype, torch._fake.tf32_on())])
    dist_calls = []

    def run_dist(world, backend, perf, timeout):
        dist_calls.append((world, backend, perf))
        return {"figures": {"busbw_gbps": run_dist_bw} if run_dist_bw else {},
                "reason": "nccl all_reduce timed out after 240 s"}

    monkeypatch.setattr(perf, "run_dist", run_dist)
    p = _probe("perf", torch)
    if nccl_busbw:
        p.doc["distributed"] = {"nccl": {"figures": {"busbw_gbps": nccl_busbw}}}
    perf.run(p)
    c = _checks(p)
    for label, s in (("fp32", 0.010), ("tf32", 0.004), ("bf16", 0.002)):
        want = round(2 * 8192 ** 3 / s / 1e12, 1)
        assert p.doc["perf"][f"{label}_tflops"] == want and c[f"perf.gemm_{label}"]["status"] == "passed"
        assert c[f"perf.gemm_{label}"]["figures"]["metric"] == f"{label}_tflops"
    assert (c["perf.allreduce"]["status"], c["perf.allreduce"]["reason"]) == allreduce
    assert dist_calls == ([(2, "nccl", True)] if len(devices) == 2 and not nccl_busbw else [])
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"  # the image's policy back after the IEEE/bf16 GEMMs


# --- te: fp8_autocast on sm_89+ (the child probe) -----------------------------------------------------------------

def _fake_te(monkeypatch, out=1.0, error=None):
    """transformer_engine with a te.Linear whose output is `out` (NaN: a broken FP8 kernel) or that raises."""
    class Linear:
        def __init__(self, *a, **k):
            self.weight = types.SimpleNamespace(grad=None)

        def cuda(self):
            return self

        def __call__(self, x):
            if error:
                raise RuntimeError(error)
            self.weight.grad = x.grad
            return x._new(value=out, dtype="torch.bfloat16")

    root = types.ModuleType("transformer_engine")
    root.__version__ = "2.8.0"
    root.pytorch = types.SimpleNamespace(Linear=Linear, fp8_autocast=lambda enabled, fp8_recipe: contextlib.nullcontext())
    recipe = types.SimpleNamespace(DelayedScaling=lambda **k: k, Format=types.SimpleNamespace(HYBRID="HYBRID"))
    common = types.SimpleNamespace(recipe=recipe)
    for name, mod in (("transformer_engine", root), ("transformer_engine.pytorch", root.pytorch),
                      ("transformer_engine.common", common), ("transformer_engine.common.recipe", recipe)):
        monkeypatch.setitem(sys.modules, name, mod)


@pytest.mark.parametrize("device, te_kw, status, reason", [
    (H200, {}, "passed", "te.Linear forward/backward under fp8_autocast"),
    (L4, {}, "passed", "te.Linear forward/backward under fp8_autocast"),
    (A100, {}, "skipped", "FP8 needs sm_89+, GPU is sm_80"),
    (H200, {"out": float("nan")}, "failed", "non-finite output or gradient under fp8_autocast"),
    (H200, {"error": "CUBLAS_STATUS_NOT_SUPPORTED"}, "failed", "RuntimeError: CUBLAS_STATUS_NOT_SUPPORTED"),
])
def test_te_fp8_on_the_gpu(monkeypatch, device, te_kw, status, reason):
    _fake_te(monkeypatch, **te_kw)
    p = _probe("te", fake_cuda_torch([device]))
    te.child(p)
    c = _checks(p)
    assert c["te.import"]["status"] == "passed" and c["te.import"]["reason"] == "transformer_engine 2.8.0"
    assert (c["te.fp8"]["status"], c["te.fp8"]["reason"]) == (status, reason)
    if status == "passed":
        assert c["te.fp8"]["figures"]["sm"] == f"sm_{device.capability[0]}{device.capability[1]}"


# --- distributed: NCCL over one process per GPU --------------------------------------------------------------------

def test_distributed_runs_nccl_over_every_gpu(monkeypatch):
    calls = []
    monkeypatch.setattr(distributed, "run_dist", lambda world, backend, perf, timeout: calls.append(
        (world, backend, perf)) or {"status": "passed", "reason": "nccl ok", "figures": {"world_size": world}})
    p = _probe("distributed", fake_cuda_torch([H200] * 4))
    distributed.run(p)
    c = _checks(p)
    assert calls == [(4, "nccl", False)] and p.doc["distributed"]["nccl"]["reason"] == "nccl ok"
    assert c["distributed.nccl"]["status"] == "passed" and c["distributed.nccl"]["figures"] == {"world_size": 4}
    assert (c["distributed.gloo"]["status"], c["distributed.gloo"]["reason"]) == (
        "skipped", "GPU present: NCCL checked instead")


_RANK = r"""
import json, os, sys
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
peer = (rank + 1) % world
print(f"node:{100 + rank}:{100 + rank} [{rank}] NCCL INFO NCCL version 2.27.5+cuda12.9")
print(f"node:{100 + rank}:{200 + rank} [{rank}] NCCL INFO Channel 00/0 : {rank}[{rank}] -> {peer}[{peer}] via P2P/CUMEM/read")
print("NCCL_DEBUG=" + os.environ.get("NCCL_DEBUG", ""))
res = {"rank": rank, "ok": os.environ.get("FAKE_BAD_RANK") != str(rank), "busbw_gbps": 350.0 + rank}
if not res["ok"]:
    res["error"] = f"rank {rank}: all_reduce gave 1.0, want 3.0"
print("IBPROBE-RESULT " + json.dumps(res))
"""


@pytest.mark.parametrize("bad_rank", [None, "1"])
def test_nccl_ranks_log_and_results_are_read(monkeypatch, bad_rank):
    """run_dist's NCCL path: one worker per GPU (here a python printing what a rank prints), the NCCL_DEBUG log
    parsed for the transport, each rank's RESULT line judged."""
    def launch(args, env=None, merged=False):
        out = tempfile.TemporaryFile()
        proc = subprocess.Popen([sys.executable, "-c", _RANK, *args], stdout=out, stderr=subprocess.STDOUT, env=env)
        return proc, out, out

    monkeypatch.setattr(distributed, "launch", launch)
    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    if bad_rank:
        monkeypatch.setenv("FAKE_BAD_RANK", bad_rank)
    res = distributed.run_dist(2, "nccl", perf=True, timeout=60)
    fig = res["figures"]
    assert fig["transports"] == ["P2P/CUMEM"] and fig["nccl_version"] == "2.27.5+cuda12.9" and fig["channels"] == 2
    assert fig["busbw_gbps"] == 350.0 and fig["returncodes"] == [0, 0] and "NCCL_DEBUG=INFO" in res["log_tail"]
    if bad_rank:
        assert res["status"] == "failed"
        assert res["reason"] == "nccl all_reduce over 2 process(es) failed: rank 1: all_reduce gave 1.0, want 3.0"
    else:
        assert (res["status"], res["reason"]) == ("passed", "nccl all_reduce correct over 2 process(es) via P2P/CUMEM")


# --- release: conv2d/SVD on CUDA, the error-path child (device-side assert, GDS) ----------------------------------

@pytest.mark.parametrize("child", [{"checks": [{"name": "release.cuda_errors", "status": "passed"}]},
                                   {"error": "child probe timed out after 300 s"}])
def test_release_runs_the_cuda_checks_and_the_error_path_child(monkeypatch, child):
    devices, args = [], []
    monkeypatch.setattr(release, "_conv2d", lambda torch, d: devices.append(("conv2d", d)) or (True, "ok", {}))
    monkeypatch.setattr(release, "_svd", lambda torch, d: devices.append(("svd", d)) or (d == "cpu", "svd", {}))
    monkeypatch.setattr(release, "_cpu_isa", lambda p, torch, doc: None)
    monkeypatch.setattr(release, "installed_version", lambda *names: (names[0], "9.10.2.21"))
    monkeypatch.setattr(release, "run_child", lambda a, timeout: args.append(a) or child)
    p = _probe("release")
    release.run(p)
    c = _checks(p)
    assert devices == [("conv2d", "cpu"), ("svd", "cpu"), ("conv2d", "cuda"), ("svd", "cuda")]
    assert c["release.conv2d_cuda"]["status"] == "passed" and c["release.linalg_cuda"]["status"] == "failed"
    assert args == [["--sections", "release", "--child", "release"]]
    if "error" in child:
        for name in ("release.cuda_errors", "release.gds_errors"):
            assert c[name]["reason"] == "error-path probe did not finish: child probe timed out after 300 s"
    else:
        assert c["release.cuda_errors"]["status"] == "passed" and "release.gds_errors" not in c


@pytest.mark.parametrize("kw, gds, cuda_errors", [
    ({}, ("passed", "GDS failure surfaced as RuntimeError: cuFileHandleRegister failed"), ("passed", "device-side")),
    ({"cuda": "12.4"}, ("skipped", "GPUDirect Storage bindings need CUDA >= 12.6"), ("passed", "device-side")),
    ({"device_assert": False}, ("passed", "GDS failure"), ("failed", "torch._assert_async(tensor(0)) on CUDA raised")),
    ({"no_gds": True}, ("failed", "torch.cuda.gds.GdsFile is missing"), ("passed", "device-side")),
])
def test_release_child_device_assert_and_gds(kw, gds, cuda_errors):
    kw = dict(kw)
    no_gds = kw.pop("no_gds", False)
    torch = fake_cuda_torch(**kw)
    if no_gds:
        del torch.cuda.gds
    p = _probe("release", torch)
    release.child(p)
    c = _checks(p)
    assert list(c) == ["release.gds_errors", "release.cuda_errors"]  # the assert last: it poisons the context
    assert c["release.gds_errors"]["status"] == gds[0] and c["release.gds_errors"]["reason"].startswith(gds[1])
    assert c["release.cuda_errors"]["status"] == cuda_errors[0]
    assert c["release.cuda_errors"]["reason"].startswith(cuda_errors[1])


# --- compile: torch.compile on CUDA (Triton) ----------------------------------------------------------------------

@pytest.mark.parametrize("libcuda, cuda_error", [(True, None), (False, "triton: libcuda.so cannot found!")])
def test_compile_child_compiles_on_cuda(monkeypatch, libcuda, cuda_error):
    calls = []

    def work(kind):
        def fn(torch, device, mode=None):
            calls.append((kind, device, mode))
            if device == "cuda" and cuda_error:
                raise RuntimeError(cuda_error)
            return True, f"{device} {kind} matches eager", {}
        return fn

    tc = {"cxx": "/usr/bin/g++", "cc": "/usr/bin/cc", "python_include": "/usr/include/python3.11", "python_h": True,
          "libcuda_in_ldconfig": libcuda}
    monkeypatch.setattr(torch_compile, "toolchain", lambda: tc)
    monkeypatch.setattr(torch_compile, "_function", work("function"))
    monkeypatch.setattr(torch_compile, "_module", work("module"))
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")  # child() sets it for Inductor: not for the test process
    p = _probe("compile")
    torch_compile.child(p)
    c = _checks(p)
    assert [x for x in calls if x[1] == "cuda"] == [("function", "cuda", None), ("module", "cuda", None)]
    assert all(c[n]["status"] == "passed" for n in torch_compile.CPU_CHECKS)  # libcuda matters to Triton only
    for name in torch_compile.GPU_CHECKS:
        if cuda_error:
            assert c[name]["status"] == "failed"
            assert c[name]["reason"] == ("missing libcuda.so.1 is not in the loader cache (ldconfig -p): Triton cannot "
                                         f"find the driver -- RuntimeError: {cuda_error}")
        else:
            assert c[name]["status"] == "passed" and c[name]["reason"].startswith("cuda ")


# --- dev: nvcc compiles with -arch=native and runs the kernel -----------------------------------------------------

_NVCC = """#!/bin/sh
echo "$@" >> "$NVCC_LOG"
case " $* " in *" -arch=native "*) if [ -n "$FAKE_OLD_NVCC" ]; then
  echo "nvcc fatal   : Value 'native' is not defined for option 'gpu-architecture'" >&2; exit 1; fi;; esac
while [ $# -gt 0 ]; do if [ "$1" = -o ]; then out="$2"; fi; shift; done
printf '#!/bin/sh\\necho "%s"\\nexit %s\\n' "$FAKE_KERNEL_OUT" "$FAKE_KERNEL_RC" > "$out"; chmod +x "$out"
"""


@pytest.mark.parametrize("old_nvcc, kernel, status, reason", [
    ("", ("ok 1024", 0), "passed", "compiled and ran a kernel"),
    ("1", ("ok 1024", 0), "passed", "compiled and ran a kernel"),  # no -arch=native: compiled again without it
    ("", ("cudaMalloc failed", 2), "failed", "kernel run: rc=2 cudaMalloc failed"),
])
def test_dev_nvcc_compiles_and_runs_a_kernel_on_the_gpu(monkeypatch, tmp_path, old_nvcc, kernel, status, reason):
    (tmp_path / "nvcc").write_text(_NVCC)
    (tmp_path / "nvcc").chmod(0o755)
    log = tmp_path / "nvcc.log"
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    for key, value in (("NVCC_LOG", str(log)), ("FAKE_OLD_NVCC", old_nvcc), ("FAKE_KERNEL_OUT", kernel[0]),
                       ("FAKE_KERNEL_RC", str(kernel[1]))):
        monkeypatch.setenv(key, value)
    p = _probe("dev")
    p.doc["dev"] = {}
    dev._nvcc(p)
    c = _checks(p)["dev.nvcc"]
    assert (c["status"], c["reason"]) == (status, reason) and c["figures"]["ran"] is True
    calls = log.read_text().splitlines()
    assert calls[0].endswith("k.cu -arch=native") and len(calls) == (2 if old_nvcc else 1)
    assert p.doc["dev"]["nvcc"] == str(tmp_path / "nvcc")


# --- hpc: the CUDA program a job runs first, against the fake torch in a child python -----------------------------

@pytest.mark.parametrize("devices, status, output", [([H200], "passed", "ok NVIDIA H200"),
                                                       ([], "skipped", None)])
def test_hpc_cuda_program_runs_on_the_fake_gpu(monkeypatch, tmp_path, devices, status, output):
    (tmp_path / "torch.py").write_text(f"import sys\nsys.path.insert(0, {str(UNIT_DIR)!r})\n"
                                       "from _fake_cuda_torch import H200, fake_cuda_torch\n"
                                       f"sys.modules[__name__] = fake_cuda_torch({'[H200]' if devices else '[]'})\n")
    cuda = hpccode.run_code(hpccode.CUDA, env=dict(os.environ, PYTHONPATH=str(tmp_path)), timeout=60)
    canned = {"import": (True, "2.13.0+cu128"), "compile": (True, "ok"), "caches": (True, "{}"), "cuda": cuda}
    monkeypatch.setattr(hpcruntime, "answers_of", lambda stages, timeout: canned)
    monkeypatch.setattr(hpcruntime, "_has", lambda module: module == "torch")
    monkeypatch.setattr(hpcruntime, "jupyter", lambda p: None)
    monkeypatch.setattr(hpcruntime, "dev_tools", lambda p: None)
    for name in hpcruntime.hostile_variables():
        monkeypatch.delenv(name)
    p = P.Probe(["hpc"])
    hpcruntime.run(p)
    c = _checks(p)["hpc.cuda"]
    assert c["status"] == status, c
    assert c["figures"].get("output") == output and (output or c["reason"] == P.NO_GPU)


def test_hpc_cuda_failure_is_reported_as_the_uid_saw_it(monkeypatch):
    for name in hpcruntime.hostile_variables():
        monkeypatch.delenv(name)
    p = P.Probe(["hpc"])
    error = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    assert hpcruntime._run_named(p, "hpc.cuda", hpccode.CUDA, "a CUDA tensor", answer=(False, error)) is False
    assert _checks(p)["hpc.cuda"]["reason"] == f"a CUDA tensor failed as uid {os.getuid()}: {error}"


# --- versions: CUDA, cuDNN and NCCL of a CUDA build ---------------------------------------------------------------

def test_versions_of_a_cuda_torch():
    p = _probe("versions", fake_cuda_torch(cudnn=91002, nccl=(2, 27, 5)))
    versions.run(p)
    v = p.doc["versions"]
    assert (v["torch"], v["cuda"], v["cudnn"], v["nccl"]) == ("2.13.0+cu128", "12.8", "9.10.2", "2.27.5")
    assert v["torch_git"] == "0" * 40 and "nccl" not in v["import_errors"]


def test_versions_names_an_nccl_that_does_not_load():
    torch = fake_cuda_torch()
    torch.cuda.nccl.version = lambda: (_ for _ in ()).throw(RuntimeError("NCCL Error 2: unhandled system error"))
    p = _probe("versions", torch)
    versions.run(p)
    v = p.doc["versions"]
    assert v["nccl"] is None and v["import_errors"]["nccl"] == "NCCL Error 2: unhandled system error"
    assert v["cudnn"] == "9.10.2"
