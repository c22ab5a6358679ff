"""NUMA placement for the selected GPUs: pin the container to the CPUs and memory of the node its GPUs hang off when
they share one (a rank whose data loader and pinned buffers sit on the far socket loses host-to-device bandwidth and
CPU throughput); when they span nodes, pin nothing and say why."""

from __future__ import annotations

from dataclasses import dataclass

from imagebuild.host import Gpu, Topology, format_cpulist, parse_cpulist


@dataclass(frozen=True)
class Placement:
    cpus: str | None = None  # --cpuset-cpus
    mems: str | None = None  # --cpuset-mems
    note: str = ""  # one line: what was done and why


def _indexes(gpus: list[Gpu]) -> str:
    return ",".join(str(g.index) for g in gpus)


def place(gpus: tuple[Gpu, ...], topo: Topology) -> Placement:
    if not gpus:
        return Placement()
    if len(topo.nodes) <= 1:
        return Placement(note="NUMA: this host has one NUMA node: no pinning needed")
    unknown = [g for g in gpus if g.numa_node is None]
    if unknown:
        return Placement(note=f"NUMA: GPU {_indexes(unknown)} reports no NUMA node (sysfs numa_node = -1): not pinned")
    nodes: dict[int, list[Gpu]] = {}
    for g in gpus:
        nodes.setdefault(g.numa_node or 0, []).append(g)
    if len(nodes) > 1:
        where = " and ".join(f"{n} (GPU {_indexes(gs)})" for n, gs in sorted(nodes.items()))
        return Placement(note=f"NUMA: the selected GPUs span nodes {where}: not pinned, since one node's CPUs would "
                              "starve the other node's GPUs; bind each rank to its GPU's node inside the container "
                              "(numactl --cpunodebind=N --membind=N) or select GPUs of one node with --gpus")
    node = next(iter(nodes))
    cpus: set[int] | None = None
    for g in gpus:  # the GPUs' own local CPUs (they can be narrower than the node, e.g. sub-NUMA clustering)
        local = parse_cpulist(g.local_cpus or topo.nodes.get(node, ""))
        cpus = local if cpus is None else cpus & local
    if not cpus:
        cpus = parse_cpulist(topo.nodes.get(node, ""))
    if not cpus:
        return Placement(note=f"NUMA: node {node} lists no CPUs: not pinned")
    text = format_cpulist(cpus)
    return Placement(cpus=text, mems=str(node),
                     note=f"NUMA: GPU {_indexes(list(gpus))} on node {node}: pinned to its CPUs {text} and its memory "
                          "(--cpuset-cpus/--cpuset-mems; --no-numa turns this off)")
