"""perf (--perf, GPU): GEMM TFLOP/s in fp32/tf32/bf16 and NCCL all_reduce bus bandwidth."""

from __future__ import annotations

from probe.common import NO_TORCH, Probe
from probe.distributed import run_dist
from probe.tf32 import restore_tf32, save_tf32, set_tf32, time_cuda


def run(p: Probe):
    torch = p.import_torch()
    p.doc["perf"] = {}
    usable, reason = (False, NO_TORCH) if torch is None else p.gpu_state()
    names = ("perf.gemm_fp32", "perf.gemm_tf32", "perf.gemm_bf16")
    if not usable:
        for n in names:
            p.check(n, "skipped", reason)
        p.check("perf.allreduce", "skipped", reason)
        return
    size = 8192
    dev = torch.device("cuda:0")
    saved = save_tf32(torch)
    try:
        for label, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                                   ("bf16", torch.bfloat16, False)):
            set_tf32(torch, tf32)
            a = torch.randn(size, size, device=dev, dtype=dtype)
            b = torch.randn(size, size, device=dev, dtype=dtype)
            secs = time_cuda(torch, lambda a=a, b=b: a @ b, warmup=5, reps=20)
            tflops = 2 * size ** 3 / secs / 1e12
            p.doc["perf"][f"{label}_tflops"] = round(tflops, 1)
            p.check(f"perf.gemm_{label}", "passed", f"{tflops:.1f} TFLOP/s ({size}x{size}, median of 20)",
                       tflops=round(tflops, 1), n=size, ms=round(secs * 1e3, 3), metric=f"{label}_tflops")
            del a, b
    finally:
        restore_tf32(torch, saved)
        torch.cuda.empty_cache()
    nccl = (p.doc.get("distributed") or {}).get("nccl")
    if torch.cuda.device_count() < 2:
        p.check("perf.allreduce", "skipped", "needs 2+ GPUs")
    elif nccl and nccl.get("figures", {}).get("busbw_gbps"):
        bw = nccl["figures"]["busbw_gbps"]
        p.doc["perf"]["allreduce_busbw_gbps"] = bw
        p.check("perf.allreduce", "passed", f"NCCL all_reduce bus bandwidth {bw} GB/s",
                   busbw_gbps=bw, metric="allreduce_busbw_gbps")
    else:
        res = run_dist(torch.cuda.device_count(), "nccl", perf=True, timeout=p.remaining(240))
        bw = res["figures"].get("busbw_gbps")
        if bw:
            p.doc["perf"]["allreduce_busbw_gbps"] = bw
            p.check("perf.allreduce", "passed", f"NCCL all_reduce bus bandwidth {bw} GB/s",
                       busbw_gbps=bw, metric="allreduce_busbw_gbps")
        else:
            p.check("perf.allreduce", "failed", res["reason"])
