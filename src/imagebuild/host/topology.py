"""GPUs, MIG devices and NUMA placement of a host, read under a root directory.

Where each fact comes from (all paths under `root`, "/" on a live host):
  - the GPU list: nvidia-smi's `--query-gpu=index,uuid,pci.bus_id,name` CSV when given, else
    proc/driver/nvidia/gpus/<bus id>/information (Model, GPU UUID, Bus Location; indexes in PCI bus order, which is
    nvidia-smi's default order and the one `docker run --gpus device=N` uses);
  - MIG devices: nvidia-smi -L (indented `MIG <profile> Device <j>: (UUID: MIG-...)` lines under their GPU);
  - NUMA: sys/bus/pci/devices/<bus id>/numa_node (-1: not reported) and local_cpulist;
    the nodes' CPUs: sys/devices/system/node/node<N>/cpulist.
nvidia-smi prints bus IDs with an 8-digit PCI domain in upper case (00000000:18:00.0); sysfs and /proc use 4 digits
in lower case (0000:18:00.0): `normalize_bus_id` maps one to the other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class MigDevice:
    uuid: str  # MIG-xxxxxxxx-...
    profile: str  # "3g.40gb"
    device: int  # "Device <j>" under its GPU


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str  # GPU-xxxxxxxx-...
    bus_id: str  # sysfs form: 0000:18:00.0
    name: str
    numa_node: int | None = None  # None: the firmware reports none (-1) or sysfs has no entry
    local_cpus: str | None = None  # the device's local_cpulist as sysfs writes it ("0-55,112-167")
    mig: tuple[MigDevice, ...] = ()


@dataclass(frozen=True)
class Topology:
    gpus: tuple[Gpu, ...] = ()
    nodes: dict[int, str] = field(default_factory=dict)  # NUMA node -> its cpulist
    source: str = "none"  # where the GPU list came from: "nvidia-smi", "/proc/driver/nvidia" or "none"

    def by_index(self) -> dict[int, Gpu]:
        return {g.index: g for g in self.gpus}


def parse_cpulist(text: str) -> set[int]:
    """sysfs cpulist ("0-55,112-167", "3", "") -> the CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def format_cpulist(cpus: set[int]) -> str:
    """The CPU numbers as a cpulist with ranges, the form --cpuset-cpus takes."""
    out: list[str] = []
    run: list[int] = []
    for cpu in sorted(cpus):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [cpu]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def normalize_bus_id(bus_id: str) -> str:
    """00000000:18:00.0 / 0000:18:00.0 / 18:00.0 -> 0000:18:00.0 (sysfs form)."""
    text = bus_id.strip().lower()
    parts = text.split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    if len(parts) != 3:
        return text
    domain = parts[0][-4:].rjust(4, "0")
    return f"{domain}:{parts[1]}:{parts[2]}"


_CPULIST = re.compile(r"(?:\d{1,5}(?:-\d{1,5})?)(?:,\d{1,5}(?:-\d{1,5})?)*")
_BUS_ID = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def _cpulist(text: str | None) -> str | None:
    """A sysfs cpulist as read, when it is one (a recorded tree could hold anything; CPU numbers below 100000)."""
    return text if text is not None and (text == "" or _CPULIST.fullmatch(text)) else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except (OSError, ValueError):  # unreadable, or a path the OS cannot take (an embedded NUL)
        return None


def _gpus_from_smi(query: str) -> list[tuple[int, str, str, str]]:
    rows = []
    for line in query.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 3 or not cols[0].isdigit():
            continue
        rows.append((int(cols[0]), cols[1], normalize_bus_id(cols[2]), ", ".join(cols[3:])))
    return rows


def _gpus_from_proc(root: Path) -> list[tuple[int, str, str, str]]:
    base = root / "proc" / "driver" / "nvidia" / "gpus"
    found = []
    for info in sorted(base.glob("*/information")):
        fields: dict[str, str] = {}
        for line in (_read(info) or "").splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        bus = normalize_bus_id(fields.get("Bus Location") or info.parent.name)
        found.append((bus, fields.get("GPU UUID", ""), fields.get("Model", "")))
    return [(i, uuid, bus, name) for i, (bus, uuid, name) in enumerate(sorted(found))]


_GPU_LINE = re.compile(r"^GPU (\d+): (.*) \(UUID: (GPU-[0-9a-fA-F-]+)\)\s*$")
_MIG_LINE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9A-Za-z/-]+)\)\s*$")


def parse_smi_list(text: str) -> dict[int, tuple[str, str, list[MigDevice]]]:
    """nvidia-smi -L -> {gpu index: (name, uuid, [MIG devices])}."""
    out: dict[int, tuple[str, str, list[MigDevice]]] = {}
    current: int | None = None
    for line in text.splitlines():
        if m := _GPU_LINE.match(line):
            current = int(m.group(1))
            out[current] = (m.group(2), m.group(3), [])
        elif (m := _MIG_LINE.match(line)) and current is not None:
            out[current][2].append(MigDevice(uuid=m.group(3), profile=m.group(1), device=int(m.group(2))))
    return out


def read_topology(root: Path = Path("/"), smi_query: str | None = None, smi_list: str | None = None) -> Topology:
    """The host's GPUs (with MIG devices, NUMA node, local CPUs) and NUMA nodes, read under `root`."""
    listed = parse_smi_list(smi_list) if smi_list else {}
    if smi_query and (rows := _gpus_from_smi(smi_query)):
        source = "nvidia-smi"
    elif rows := _gpus_from_proc(root):
        source = "/proc/driver/nvidia"
    else:
        rows, source = [], "none"
    gpus = []
    for index, uuid, bus, name in rows:
        dev = root / "sys" / "bus" / "pci" / "devices" / (bus if _BUS_ID.fullmatch(bus) else "unknown")
        node_text = _read(dev / "numa_node")
        node = int(node_text) if node_text and node_text.lstrip("-").isdigit() and int(node_text) >= 0 else None
        mig = tuple(listed[index][2]) if index in listed and listed[index][1] == uuid else ()
        gpus.append(Gpu(index=index, uuid=uuid, bus_id=bus, name=name, numa_node=node,
                        local_cpus=_cpulist(_read(dev / "local_cpulist")) or None, mig=mig))
    nodes: dict[int, str] = {}
    for path in (root / "sys" / "devices" / "system" / "node").glob("node[0-9]*"):
        cpus = _cpulist(_read(path / "cpulist"))
        if cpus is not None and path.name[4:].isascii() and path.name[4:].isdigit():
            nodes[int(path.name[4:])] = cpus
    return Topology(gpus=tuple(gpus), nodes=dict(sorted(nodes.items())), source=source)
