"""Run nvidia-smi for the GPU list: the query CSV (index, UUID, PCI bus ID, name) and `-L` (the only listing of MIG
device UUIDs). Both are plain text handed to `read_topology`, so tests pass recorded outputs instead."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from imagebuild.errors import UsageError

QUERY_ARGS = ["--query-gpu=index,uuid,pci.bus_id,name", "--format=csv,noheader"]


RECORDED = {"smi_query": "query-gpu.csv", "smi_list": "L.txt"}  # <root>/nvidia-smi/<file> in a recorded tree
HOST_TREE = ("sys", "proc", "nvidia-smi")  # what a root holds when it is a host (live or recorded)


def host_root(root: Path, option: str) -> Path:
    """`root` when it is a host tree to read facts under; else one UsageError naming `option`. A mistyped path would
    otherwise read as a host with no GPUs and no fabric, and print a CPU-only job as if that were the node."""
    if root == Path("/"):
        return root
    if not root.is_dir():
        raise UsageError(f"{option} {root}: no such folder (want the root of a host tree, e.g. one recorded on a "
                         "compute node, holding sys/ and proc/)")
    if not any((root / name).is_dir() for name in HOST_TREE):
        raise UsageError(f"{option} {root}: not a host tree (none of {', '.join(n + '/' for n in HOST_TREE)} in it)")
    return root


def nvidia_smi_outputs(root: Path = Path("/"), timeout: float = 20.0) -> dict[str, str | None]:
    """{"smi_query": ..., "smi_list": ...}: each the command's stdout, or None when nvidia-smi is missing or fails
    (a driver without GPUs, a broken install): the reader then falls back to /proc/driver/nvidia. Under a root other
    than "/" (a recorded host) the recorded outputs <root>/nvidia-smi/{query-gpu.csv,L.txt}, when present."""
    out: dict[str, str | None] = {"smi_query": None, "smi_list": None}
    if root != Path("/"):
        for key, name in RECORDED.items():
            path = root / "nvidia-smi" / name
            out[key] = path.read_text(errors="replace") if path.is_file() else None
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
