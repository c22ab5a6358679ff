"""`--gpus` for `imagebuild run`: all, none, or a list of GPU indexes, GPU UUIDs and MIG device UUIDs, checked against
the host's GPU list before any container exists."""

from __future__ import annotations

from dataclasses import dataclass

from imagebuild.errors import UsageError
from imagebuild.host import Gpu, Topology

NO_GPUS_NOTE = "no GPUs on this host: running without them"


@dataclass(frozen=True)
class GpuSelection:
    request: bool  # ask the engine for GPUs at all
    device_ids: tuple[str, ...] = ()  # what the engine gets (`--gpus "device=..."`); empty with request: all
    gpus: tuple[Gpu, ...] = ()  # the physical GPUs behind the selection (a MIG device's parent), for NUMA placement
    note: str | None = None  # one line for the user, when something is not as asked


def _valid(topo: Topology) -> str:
    indexes = [g.index for g in topo.gpus]
    span = f"{min(indexes)}-{max(indexes)}" if len(indexes) > 1 else str(indexes[0])
    mig = sum(len(g.mig) for g in topo.gpus)
    return (f"valid choices: all, none, GPU indexes {span}, their GPU- UUIDs"
            + (f" or one of the {mig} MIG- device UUIDs" if mig else "") + " (nvidia-smi -L lists them)")


def select_gpus(spec: str, topo: Topology, engine_has_gpus: bool) -> GpuSelection:
    """Resolve `--gpus SPEC` against the host: UsageError (one line, with the valid choices) for an unknown index or
    UUID; no GPUs on the host with `all` runs without them (and says so)."""
    text = spec.strip().strip("\"'")  # docker's own spelling: '"device=0,1"'
    if text.startswith("device="):
        text = text[len("device="):]
    if text in ("none", "0-gpus", ""):
        return GpuSelection(request=False)
    if not topo.gpus:
        if text == "all":
            if engine_has_gpus:
                return GpuSelection(True, note="could not list this host's GPUs (no nvidia-smi output, no "
                                                "/proc/driver/nvidia): requesting all GPUs, no NUMA placement")
            return GpuSelection(request=False, note=NO_GPUS_NOTE)
        if engine_has_gpus:
            return GpuSelection(True, tuple(t.strip() for t in text.split(",") if t.strip()),
                                note=f"could not list this host's GPUs: --gpus {spec} passed unchecked, "
                                     "no NUMA placement")
        raise UsageError(f"--gpus {spec}: this host has no GPUs (nvidia-smi lists none); use --gpus none, or run on "
                         "a GPU host")
    if text == "all":
        return GpuSelection(True, (), topo.gpus)
    by_index = topo.by_index()
    by_uuid = {g.uuid.lower(): g for g in topo.gpus}
    mig_parent = {m.uuid.lower(): (g, m) for g in topo.gpus for m in g.mig}
    ids: list[str] = []
    parents: list[Gpu] = []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        low = token.lower()
        if token.isdigit() and int(token) in by_index:
            gpu, dev_id = by_index[int(token)], token
        elif low in by_uuid:
            gpu, dev_id = by_uuid[low], by_uuid[low].uuid
        elif low in mig_parent:
            gpu, dev_id = mig_parent[low][0], mig_parent[low][1].uuid
        else:
            what = ("GPU index" if token.isdigit() else "MIG device" if low.startswith("mig-")
                    else "GPU UUID" if low.startswith("gpu-") else "GPU")
            raise UsageError(f"--gpus {spec}: no {what} {token!r} on this host; {_valid(topo)}")
        if dev_id not in ids:
            ids.append(dev_id)
        if gpu not in parents:
            parents.append(gpu)
    if not ids:
        raise UsageError(f"--gpus {spec!r}: names no GPU; {_valid(topo)}")
    return GpuSelection(True, tuple(ids), tuple(parents))
