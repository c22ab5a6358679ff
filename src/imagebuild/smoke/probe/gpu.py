"""gpu: devices torch sees, nvidia-smi -L (GPUs and MIG devices), driver, torch's compiled arch list."""

from __future__ import annotations

import re
import subprocess

from probe.common import Probe, which

_SMI_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>GPU-[^)]+)\)\s*$")
_SMI_MIG = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<device>\d+): \(UUID: (?P<uuid>MIG-[^)]+)\)\s*$")


def parse_nvidia_smi_list(text: str) -> dict:
    """`nvidia-smi -L` -> {"gpus": [{index, name, uuid, mig: [{profile, device, uuid}]}], "gpu_count", "mig_count"}."""
    gpus: list[dict] = []
    unparsed = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        m = _SMI_GPU.match(raw.strip())
        if m:
            gpus.append({"index": int(m.group("index")), "name": m.group("name"), "uuid": m.group("uuid"), "mig": []})
            continue
        m = _SMI_MIG.match(raw if raw[:1].isspace() else " " + raw)
        if m and gpus:
            gpus[-1]["mig"].append({"profile": m.group("profile"), "device": int(m.group("device")),
                                    "uuid": m.group("uuid")})
            continue
        unparsed.append(raw.strip())
    return {
        "gpus": gpus,
        "gpu_count": len(gpus),
        "mig_count": sum(len(g["mig"]) for g in gpus),
        "unparsed": unparsed,
    }


def normalize_arch(a: str) -> str:
    """"9.0" / "90" / "sm90" / "sm_90" -> "sm_90"; "compute_90" kept."""
    a = a.strip().lower()
    if a.startswith("compute_"):
        return a
    a = a.replace("sm_", "").replace("sm", "")
    if "." in a:
        major, minor = a.split(".", 1)
        a = f"{major}{minor}"
    return f"sm_{a}"


_ARCH = re.compile(r"^(?P<kind>sm|compute)_(?P<num>\d+)(?P<suffix>[a-z]?)$")


def arch_runs_on(sm: str, arch_list) -> bool:
    """Does torch's arch list carry code that a GPU of arch `sm` (sm_XY) runs? CUDA's compatibility rules: SASS
    for sm_XZ (and family code, sm_100f) runs on sm_XY of the same major when Z <= Y (the sm_86 code of torch's
    wheels runs on an sm_89 L4: resolve/platform.py runs_natively, the planner's rule), arch-specific code (sm_90a)
    only on its own arch, and PTX (compute_XZ) is JIT-compiled for any GPU at least as new."""
    want = divmod(int(sm[3:]), 10)
    for arch in arch_list:
        m = _ARCH.match(arch.strip().lower())
        if not m:
            continue
        have = divmod(int(m.group("num")), 10)
        if have == want or (m.group("suffix") != "a" and (
                have < want if m.group("kind") == "compute" else have[0] == want[0] and have[1] < want[1])):
            return True
    return False


def run(p: Probe):
    torch = p.import_torch()
    g: dict = {"available": False, "count": 0, "devices": [], "arch_list": [], "nvidia_smi": None}
    if torch is not None and getattr(torch.version, "cuda", None):
        try:
            flags = torch._C._cuda_getArchFlags()  # compile-time list; needs no GPU
            g["arch_list"] = sorted(set(flags.split())) if flags else []
        except Exception as exc:
            g["arch_list_error"] = str(exc)
    usable, reason = p.gpu_state()
    if usable:
        g["available"] = True
        g["count"] = torch.cuda.device_count()
        for i in range(g["count"]):
            props = torch.cuda.get_device_properties(i)
            cap = torch.cuda.get_device_capability(i)
            g["devices"].append({"index": i, "name": props.name, "capability": f"{cap[0]}.{cap[1]}",
                                 "sm": f"sm_{cap[0]}{cap[1]}", "memory_bytes": int(props.total_memory),
                                 "multiprocessors": int(props.multi_processor_count)})
        try:
            g["arch_list_runtime"] = torch.cuda.get_arch_list()
        except Exception:
            pass
    smi = which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
            g["nvidia_smi"] = {"path": smi, "returncode": out.returncode,
                               "output": out.stdout[-4000:], "stderr": out.stderr[-1000:],
                               **parse_nvidia_smi_list(out.stdout)}
            q = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30)
            if q.returncode == 0 and q.stdout.strip():
                g["driver"] = q.stdout.strip().splitlines()[0].strip()
        except (OSError, subprocess.SubprocessError) as exc:
            g["nvidia_smi"] = {"path": smi, "error": str(exc)}
    p.doc["gpu"] = g
    if not usable:
        p.check("gpu.available", "skipped", reason, arch_list=g["arch_list"])
        p.check("gpu.nvidia_smi", "skipped", reason,
                   listed=(g["nvidia_smi"] or {}).get("gpu_count"))
        p.check("gpu.device_arch", "skipped", reason)
        return
    p.check("gpu.available", "passed", f"{g['count']} GPU(s): "
               + ", ".join(f"{d['name']} ({d['sm']})" for d in g["devices"]),
               count=g["count"], devices=g["devices"])
    smi_doc = g["nvidia_smi"]
    if not smi_doc or smi_doc.get("error") or smi_doc.get("returncode"):
        p.check("gpu.nvidia_smi", "failed", "nvidia-smi not found in PATH" if not smi_doc
                   else f"nvidia-smi -L failed: {smi_doc.get('error') or smi_doc.get('stderr', '').strip()}")
    else:
        listed = smi_doc["gpu_count"] + smi_doc["mig_count"]
        if smi_doc["gpu_count"] == 0 or listed < g["count"]:
            p.check("gpu.nvidia_smi", "failed",
                       f"nvidia-smi -L lists {smi_doc['gpu_count']} GPU(s) and {smi_doc['mig_count']} MIG "
                       f"device(s), torch sees {g['count']}", listed=listed)
        else:
            p.check("gpu.nvidia_smi", "passed",
                       f"{smi_doc['gpu_count']} GPU(s), {smi_doc['mig_count']} MIG device(s)",
                       gpus=smi_doc["gpus"], driver=g.get("driver"))
    missing = [d["sm"] for d in g["devices"] if g["arch_list"] and not arch_runs_on(d["sm"], g["arch_list"])]
    if missing:
        p.check("gpu.device_arch", "failed", f"torch carries no kernels for {', '.join(missing)}; "
                   f"arch list {' '.join(g['arch_list'])}")
    else:
        p.check("gpu.device_arch", "passed", "every visible GPU runs code of torch's arch list",
                   archs=[d["sm"] for d in g["devices"]])
