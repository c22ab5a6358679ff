"""Run nvidia-smi for the GPU list: the query CSV (index, UUID, PCI bus ID, name) and `-L` (the only listing of MIG
device UUIDs). Both are plain text handed to `read_topology`, so tests pass recorded outputs instead."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

QUERY_ARGS = ["--query-gpu=index,uuid,pci.bus_id,name", "--format=csv,noheader"]


RECORDED = {"smi_query": "query-gpu.csv", "smi_list": "L.txt"}  # <root>/nvidia-smi/<file> in a recorded tree


def nvidia_smi_outputs(root: Path = Path("/"), timeout: float = 20.0) -> dict[str, str | None]:
    """{"smi_query": ..., "smi_list": ...}: each the command's stdout, or None when nvidia-smi is missing or fails
    (a driver without GPUs, a broken install): the reader then falls back to /proc/driver/nvidia. Under a root other
    than "/" (a recorded host) the recorded outputs <root>/nvidia-smi/{query-gpu.csv,L.txt}, when present."""
    out: dict[str, str | None] = {"smi_query": None, "smi_list": None}
    if root != Path("/"):
        for key, name in RECORDED.items():
            path = root / "nvidia-smi" / name
            out[key] = path.read_text() if path.is_file() else None
        return out
    exe = shutil.which("nvidia-smi")
    if not exe:
        return out
    for key, args in (("smi_query", QUERY_ARGS), ("smi_list", ["-L"])):
        try:
            p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if p.returncode == 0:
            out[key] = p.stdout
    return out
