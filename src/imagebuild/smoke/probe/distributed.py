"""distributed: all_reduce over one process per GPU (NCCL, with the NCCL_DEBUG log parsed for transports) or two
CPU processes (gloo). The ranks are child probes (`--dist-worker`, probe.children: forked by the forkserver where
torch is installed)."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any

from probe.children import launch
from probe.common import NO_TORCH, RESULT_MARK, Probe, free_port, kill_tree

_NCCL_CHANNEL = re.compile(
    r"NCCL INFO Channel (?P<channel>\d+(?:/\d+)?) ?: (?P<src>\d+)\[(?P<srcdev>[^\]]+)\] -> (?P<dst>\d+)\[(?P<dstdev>[^\]]+)\]"
    r"(?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)\s*$"
)
_NCCL_VERSION = re.compile(r"NCCL version (?P<v>[0-9][\w.+-]*)")
_NCCL_RANK_PREFIX = re.compile(r"^\[\d+\]\s+")


def nccl_transport_kind(via: str) -> str:
    """`P2P/CUMEM/read` -> P2P/CUMEM, `NET/IBext_v8/0(1)/GDRDMA` -> NET/IB, `SHM/direct/direct` -> SHM, ..."""
    v = via.strip()
    if v.startswith("P2P/CUMEM"):
        return "P2P/CUMEM"
    if v.startswith("P2P/IPC"):
        return "P2P/IPC"
    if v.startswith("P2P/direct"):
        return "P2P/direct"
    if v.startswith("P2P"):
        return "P2P"
    if v.startswith("SHM"):
        return "SHM"
    if v.startswith("NET/IB"):
        return "NET/IB"
    if v.startswith("NET/Socket"):
        return "NET/Socket"
    if v.startswith("NET/"):
        return "NET/" + v.split("/")[1].split("(")[0]
    if v.startswith("NVLS"):
        return "NVLS"
    if v.startswith("CollNet"):
        return "CollNet"
    return v.split("/")[0]


def parse_nccl_log(text: str) -> dict:
    """NCCL_DEBUG=INFO output -> version, channel connections and the set of transports used."""
    version = None
    channels: list[dict[str, Any]] = []
    nvls = None
    for raw in text.splitlines():
        line = _NCCL_RANK_PREFIX.sub("", raw.rstrip())
        if version is None:
            m = _NCCL_VERSION.search(line)
            if m:
                version = m.group("v")
        m = _NCCL_CHANNEL.search(line)
        if m:
            via = m.group("via")
            channels.append({
                "channel": m.group("channel"),
                "src": int(m.group("src")), "src_dev": m.group("srcdev"),
                "dst": int(m.group("dst")), "dst_dev": m.group("dstdev"),
                "direction": m.group("dir"),
                "via": via,
                "transport": nccl_transport_kind(via),
                "gdrdma": "GDRDMA" in via,
            })
            continue
        if "NCCL INFO" in line and "NVLS" in line:
            low = line.lower()
            if "not available" in low or "not supported" in low or "disabled" in low:
                nvls = False if nvls is None else nvls
            elif "available" in low or "nvls comm" in low or "multicast" in low or " via nvls" in low:
                nvls = True
    transports = sorted({c["transport"] for c in channels})
    if nvls and "NVLS" not in transports:
        transports.append("NVLS")
    return {
        "version": version,
        "channels": channels,
        "transports": transports,
        "nvls": bool(nvls),
        "summary": ", ".join(transports) if transports else "none",
    }


def run(p: Probe):
    torch = p.import_torch()
    p.doc["distributed"] = {}
    if torch is None:
        p.check("distributed.nccl", "skipped", NO_TORCH)
        p.check("distributed.gloo", "skipped", NO_TORCH)
        return
    usable, reason = p.gpu_state()
    if usable:
        world = torch.cuda.device_count()
        res = run_dist(world, "nccl", perf=p.perf, timeout=p.remaining(240))
        p.doc["distributed"]["nccl"] = res
        p.check("distributed.nccl", res["status"], res["reason"], **res["figures"])
        p.check("distributed.gloo", "skipped", "GPU present: NCCL checked instead")
    else:
        p.check("distributed.nccl", "skipped", reason)
        res = run_dist(2, "gloo", perf=False, timeout=p.remaining(120))
        p.doc["distributed"]["gloo"] = res
        p.check("distributed.gloo", res["status"], res["reason"], **res["figures"])


def run_dist(world, backend, perf, timeout):
    """One worker process per rank (a child probe, `--dist-worker`: probe.children); collect the results and the
    NCCL log."""
    port = free_port()
    env = dict(os.environ)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world))
    if backend == "nccl":
        env.setdefault("NCCL_DEBUG", "INFO")
    else:
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    t0 = time.time()
    procs = []
    logs = []
    for rank in range(world):
        e = dict(env, RANK=str(rank), LOCAL_RANK=str(rank))
        proc, fh, _ = launch(["--dist-worker", backend] + (["--perf"] if perf else []), env=e, merged=True)
        logs.append(fh)
        procs.append(proc)
    timed_out = False
    end = time.time() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(1.0, end - time.time()))
        except subprocess.TimeoutExpired:
            timed_out = True
    for p in procs:
        if p.poll() is None:
            kill_tree(p)
            p.wait()
    results, text = [], ""
    for rank, fh in enumerate(logs):
        fh.seek(0)
        out = fh.read().decode(errors="replace")
        fh.close()
        text += "".join(f"[{rank}] {line}\n" for line in out.splitlines())
        for line in out.splitlines():
            if line.startswith(RESULT_MARK):
                try:
                    results.append(json.loads(line[len(RESULT_MARK):]))
                except ValueError:
                    pass
    seconds = round(time.time() - t0, 2)
    nccl = parse_nccl_log(text) if backend == "nccl" else None
    fig = {"backend": backend, "world_size": world, "seconds": seconds,
           "returncodes": [p.returncode for p in procs]}
    if nccl:
        fig.update(transports=nccl["transports"], transport=nccl["summary"], nccl_version=nccl["version"],
                   channels=len(nccl["channels"]))
    bws = [r.get("busbw_gbps") for r in results if r.get("busbw_gbps")]
    if bws:
        fig["busbw_gbps"] = round(min(bws), 1)
    out = {"figures": fig, "log_tail": text[-6000:], "results": results}
    if timed_out:
        out.update(status="failed", reason=f"{backend} all_reduce timed out after {timeout:.0f} s")
    elif len(results) != world or not all(r.get("ok") for r in results):
        errs = [r.get("error") for r in results if r.get("error")]
        tail = [ln for ln in text.splitlines() if ln.strip()][-3:]
        out.update(status="failed", reason=f"{backend} all_reduce over {world} process(es) failed: "
                   + ("; ".join(errs) if errs else " | ".join(tail))[-1200:])
    else:
        how = f" via {nccl['summary']}" if nccl and nccl["transports"] else (
            " (single GPU: no peer transport)" if backend == "nccl" and world == 1 else "")
        out.update(status="passed", reason=f"{backend} all_reduce correct over {world} process(es){how}")
    return out


def dist_worker(backend, perf):
    """One rank: init, all_reduce, check, optionally measure bus bandwidth; print a RESULT line."""
    res: dict[str, Any] = {"rank": int(os.environ.get("RANK", "0")), "ok": False}
    try:
        import torch
        import torch.distributed as dist

        rank, world = res["rank"], int(os.environ["WORLD_SIZE"])
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
            import inspect

            try:  # device_id (torch 2.3+) binds the communicator eagerly; inspect follows decorators
                bind = "device_id" in inspect.signature(dist.init_process_group).parameters
            except (TypeError, ValueError):
                bind = False
            dist.init_process_group("nccl", rank=rank, world_size=world, **({"device_id": device} if bind else {}))
        else:
            device = torch.device("cpu")
            dist.init_process_group("gloo", rank=rank, world_size=world)
        t = torch.full((1 << 20,), float(rank + 1), device=device)
        dist.all_reduce(t)
        expected = world * (world + 1) / 2
        res["ok"] = bool(torch.all(t == expected).item())
        res["value"] = float(t[0].item())
        res["expected"] = expected
        if not res["ok"]:
            res["error"] = f"rank {rank}: all_reduce gave {t[0].item()}, want {expected}"
        if perf and backend == "nccl" and world > 1:
            nbytes = 1 << 28
            buf = torch.ones(nbytes // 4, device=device)
            for _ in range(5):
                dist.all_reduce(buf)
            torch.cuda.synchronize()
            times = []
            for _ in range(20):
                dist.barrier()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                dist.all_reduce(buf)
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e) / 1e3)
            sec = statistics.median(times)
            res["algbw_gbps"] = round(nbytes / sec / 1e9, 1)
            res["busbw_gbps"] = round(nbytes / sec / 1e9 * 2 * (world - 1) / world, 1)
        dist.barrier()
        dist.destroy_process_group()
    except Exception as exc:
        res["error"] = f"rank {res['rank']}: {type(exc).__name__}: {exc}"[:800]
    sys.stdout.flush()
    print(RESULT_MARK + json.dumps(res), flush=True)
