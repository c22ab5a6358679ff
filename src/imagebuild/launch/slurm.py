"""`imagebuild slurm`: the srun line and sbatch script that start an image on a Slurm cluster through pyxis, from the
same host model `imagebuild run` uses (host/: GPUs and their NUMA nodes; host/fabric.py: the InfiniBand HCAs).

What is chosen and why:
- one task per GPU (`--ntasks-per-node` = GPUs per node, `--gpus-per-node`), every task seeing all of its node's GPUs
  so `LOCAL_RANK` picks the device, as torch.distributed scripts expect; RANK/WORLD_SIZE/LOCAL_RANK and
  MASTER_ADDR/MASTER_PORT come from Slurm's own variables;
- CPU and memory binding by locality domain: task i runs on the NUMA node of GPU i (`--cpu-bind=map_ldom:…`,
  `--mem-bind=map_ldom:…`) and gets its share of that node's CPUs (`--cpus-per-task`); without NUMA facts, none;
- NCCL over the fabric found: the active InfiniBand ports as `NCCL_IB_HCA==hca:port,…` (exact names, so a storage
  HCA with a similar name is not picked up); RoCE ports with their RoCE v2 GID index; no active RDMA port:
  `NCCL_IB_DISABLE=1` and a note, since NCCL would otherwise try IB and time out;
- pyxis: `--container-image` (a `.sqsh` path, or `registry#repo:tag`), `--container-mounts` (the workspace and
  what is asked), `--container-workdir`.

The host read is the one this runs on unless told otherwise: run it on a compute node, or pass a tree recorded from
one (`--host-root`), since login nodes seldom have the compute nodes' GPUs and HCAs.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from imagebuild.errors import UsageError
from imagebuild.host import Fabric, Topology, parse_cpulist
from imagebuild.oci.pyxis import container_image_flag
from imagebuild.pasteable import printable, sbatch_value, shell_lines, shell_word

MASTER_PORT = 29500


@dataclass(frozen=True)
class SlurmRequest:
    image: str  # a .sqsh path or an image reference
    command: tuple[str, ...] = ()
    nodes: int = 1
    gpus_per_node: int | None = None  # None: every GPU of the host model
    mounts: tuple[str, ...] = ()  # SRC:DST[:FLAGS] as pyxis takes them
    workspace: str | None = None  # host folder mounted at workdir
    workdir: str = "/workspace"
    job_name: str = "pytorch"
    partition: str | None = None
    time: str | None = None


@dataclass
class SlurmLines:
    srun: list[str]  # the argv, options then "--" then the command (the "--" marks where the command starts)
    env: dict[str, str]
    sbatch_options: list[str]  # `--option=VALUE`, each value already written for an #SBATCH line (pasteable)
    notes: list[str] = field(default_factory=list)

    def srun_argv(self) -> list[str]:
        """What srun is run with: the options and the command (the marker dropped; srun's options end at the
        command's first word)."""
        return [a for a in self.srun if a != "--"]

    def srun_text(self, standalone: bool = False) -> str:
        """The srun line, every word quoted for the shell (pasteable.shell_lines: options one per line, the command
        on the last); `standalone`: with the environment it needs in front (a single-node run from a shell)."""
        cut = self.srun.index("--") if "--" in self.srun else len(self.srun)
        text = shell_lines([[a] for a in self.srun[:cut]] + [self.srun[cut + 1:]])
        if not standalone:
            return text
        env = {**self.env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(MASTER_PORT)}
        return " ".join(f"{k}={shell_word(v)}" for k, v in env.items()) + " \\\n" + text

    def sbatch_text(self) -> str:
        lines = ["#!/bin/bash", *(f"#SBATCH {o}" for o in self.sbatch_options), ""]
        lines += [f"export {k}={shell_word(v)}" for k, v in self.env.items()]
        lines += ['export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
                  f"export MASTER_PORT={MASTER_PORT}", "", self.srun_text()]
        return "\n".join(lines) + "\n"


def nccl_environment(fabric: Fabric) -> tuple[dict[str, str], list[str]]:
    ib = fabric.active("InfiniBand")
    roce = fabric.active("Ethernet")
    skipped = ([f"fabric: skipped sys/class/infiniband entries that are not HCA names: {', '.join(fabric.skipped)}"]
               if fabric.skipped else [])
    if ib:
        hcas = ",".join(f"{h.name}:{p.number}" for h, p in ib)
        rates = sorted({p.rate for _, p in ib if p.rate})
        return ({"NCCL_IB_HCA": f"={hcas}"},
                [f"fabric: InfiniBand, {len(ib)} active port(s) ({hcas}; {', '.join(rates) or 'rate unknown'})",
                 *skipped])
    if roce:
        hcas = ",".join(f"{h.name}:{p.number}" for h, p in roce)
        env = {"NCCL_IB_HCA": f"={hcas}"}
        gids = {p.roce_v2_gid_index for _, p in roce}
        notes = [f"fabric: RoCE, {len(roce)} active port(s) ({hcas})", *skipped]
        if len(gids) == 1 and None not in gids:
            env["NCCL_IB_GID_INDEX"] = str(gids.pop())
        else:
            notes.append("RoCE: no single RoCE v2 GID index on every port; set NCCL_IB_GID_INDEX yourself")
        return env, notes
    down = [h.name for h in fabric.hcas]
    why = (f"HCAs {', '.join(down)} have no active port" if down else "no HCA under /sys/class/infiniband")
    return {"NCCL_IB_DISABLE": "1"}, [f"fabric: {why}: NCCL over TCP sockets (NCCL_IB_DISABLE=1)", *skipped]


def _binding(topo: Topology, count: int) -> tuple[list[str], int | None, list[str]]:
    """srun binding options for `count` tasks (task i on GPU i's NUMA node), CPUs per task, notes."""
    gpus = sorted(topo.gpus, key=lambda g: g.index)[:count]
    all_cpus = set().union(*(parse_cpulist(c) for c in topo.nodes.values())) if topo.nodes else set()
    per_task = len(all_cpus) // count if all_cpus and count else None
    if len(gpus) < count or not topo.nodes:
        return [], per_task, ["binding: GPU/NUMA facts of the node unknown: no CPU or memory binding"]
    if len(topo.nodes) <= 1:
        return [], per_task, ["binding: one NUMA node: no CPU/memory binding needed"]
    if any(g.numa_node is None for g in gpus):
        return [], per_task, ["binding: a GPU reports no NUMA node (numa_node -1): no CPU/memory binding"]
    ldoms = ",".join(str(g.numa_node) for g in gpus)
    per_node: dict[int, int] = {}
    for g in gpus:
        per_node[g.numa_node or 0] = per_node.get(g.numa_node or 0, 0) + 1
    share = min(len(parse_cpulist(topo.nodes.get(n, ""))) // k for n, k in per_node.items())
    return ([f"--cpu-bind=map_ldom:{ldoms}", f"--mem-bind=map_ldom:{ldoms}"], share or per_task,
            [f"binding: task i on GPU i's NUMA node ({ldoms}), {share} CPUs each"])


def make_slurm(req: SlurmRequest, topo: Topology, fabric: Fabric) -> SlurmLines:
    if req.nodes < 1:
        raise UsageError(f"--nodes {req.nodes}: want 1 or more")
    gpus = req.gpus_per_node if req.gpus_per_node is not None else len(topo.gpus)
    notes: list[str] = []
    if gpus < 0 or (topo.gpus and gpus > len(topo.gpus)):
        raise UsageError(f"--gpus-per-node {gpus}: the node model has {len(topo.gpus)} GPUs; valid choices: "
                         f"0-{len(topo.gpus)}")
    if not topo.gpus and req.gpus_per_node is None:
        notes.append("host model: no GPUs found (a login node?): give --gpus-per-node or --host-root of a compute "
                     "node; printing a CPU-only job")
    tasks = max(gpus, 1)
    binding, cpus_per_task, bind_notes = _binding(topo, gpus) if gpus else ([], None, [])
    notes += bind_notes
    env, fabric_notes = nccl_environment(fabric)
    notes += fabric_notes
    mounts = [_mount(m) for m in req.mounts]
    if req.workspace:
        mounts.insert(0, _mount(f"{_mount_part('--workspace', req.workspace)}:"
                              f"{_mount_part('--workdir', req.workdir)}", "--workspace"))
    resources = [f"--nodes={req.nodes}", f"--ntasks-per-node={tasks}"]
    if gpus:
        resources.append(f"--gpus-per-node={gpus}")
    if cpus_per_task:
        resources.append(f"--cpus-per-task={cpus_per_task}")
    sbatch = [f"--job-name={sbatch_value('--job-name', req.job_name)}", *resources, "--exclusive"]
    if req.partition is not None:
        sbatch.append(f"--partition={sbatch_value('--partition', req.partition)}")
    if req.time is not None:
        sbatch.append(f"--time={sbatch_value('--time', req.time)}")
    srun = ["srun", *(resources if req.nodes else []), *binding, container_image_flag(printable("IMAGE", req.image))]
    if mounts:
        srun.append("--container-mounts=" + ",".join(mounts))
    srun.append(f"--container-workdir={printable('--workdir', req.workdir)}")
    command = [printable("command", c) for c in req.command] or ["python", "train.py"]
    # each task's torch.distributed identity from Slurm's variables (expanded inside the container, per task)
    inner = ('RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID exec '
             + shlex.join(command))
    srun += ["--", "bash", "-c", inner]
    return SlurmLines(srun=srun, env=env, sbatch_options=sbatch, notes=notes)


def _mount_part(option: str, path: str) -> str:
    """A path inside a pyxis mount entry: pyxis splits `--container-mounts` at `,` (entries) and `:` (fields) with
    no way to escape either, so a path holding one cannot be said there."""
    printable(option, path)
    if "," in path or ":" in path:
        raise UsageError(f"{option} {path!r}: pyxis' --container-mounts cannot hold a ',' or ':' in a path; "
                         "mount a folder whose path has neither (or --no-workspace)")
    return path


def _mount(entry: str, option: str = "--mount") -> str:
    """One `SRC:DST[:FLAGS]` entry, checked as pyxis will split it."""
    printable(option, entry)
    parts = entry.split(":")
    if "," in entry or not 2 <= len(parts) <= 3 or not all(parts[:2]):
        raise UsageError(f"{option} {entry!r}: want SRC:DST[:FLAGS] (e.g. /lustre/data:/data:ro), no ',' in a path")
    return entry
