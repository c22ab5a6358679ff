"""From `imagebuild run`'s options, the image and the host's facts to one `ContainerSettings`: GPUs, a /dev/shm sized
from host memory (or the host's IPC namespace), memlock/stack ulimits, NUMA pinning, the current directory at
/workspace, the caller's UID/GID, a terminal when there is one, Jupyter, sshd and/or VS Code for dev images.

Everything here is decided before a container exists, so bad input stops the run with nothing to clean up."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from imagebuild.engine import ContainerSettings
from imagebuild.errors import UsageError
from imagebuild.host import Topology
from imagebuild.launch import devaccess
from imagebuild.launch.gpus import select_gpus
from imagebuild.launch.image import ImageInfo
from imagebuild.launch.numa import place

WORKSPACE = "/workspace"
RUN_LABEL = "io.imagebuild.run"
GIB = 1 << 30
SHM_MIN_GIB = 1
DEFAULT_SHM_GIB = 16  # when the host's memory size is unknown


@dataclass(frozen=True)
class RunRequest:
    """What the user asked for (the command's options, already parsed)."""

    command: tuple[str, ...] = ()
    gpus: str = "all"
    ipc_host: bool = False
    shm_size: str | None = None  # explicit --shm-size; None: sized from host memory
    numa: bool = True
    workspace: Path | None = None  # mounted at /workspace; None: no mount
    env: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    jupyter: bool = False
    ssh: bool = False
    vscode: bool = False  # dev images built with `vscode:`: code-server with a fresh password
    port: int | None = None
    ssh_key: Path | None = None
    interactive: bool = False  # stdin is a terminal: -it
    caller: tuple[int, int] = (0, 0)  # UID, GID
    home: Path = Path("~")


@dataclass
class Launch:
    settings: ContainerSettings
    notes: list[str] = field(default_factory=list)  # one line each, printed on stderr before the start
    access: devaccess.Access | None = None


def shm_size_for(mem_bytes: int | None) -> str:
    """Half the host's memory, in whole GiB (the kernel's own default for /dev/shm), at least 1 GiB. A tmpfs size is
    a ceiling, not a reservation: pages count only when written."""
    if not mem_bytes:
        return f"{DEFAULT_SHM_GIB}g"
    return f"{max(SHM_MIN_GIB, mem_bytes // 2 // GIB)}g"


_SIZE = re.compile(r"^\d+(\.\d+)?[bkmg]?$", re.IGNORECASE)


def _container_name(info: ImageInfo) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", info.ref.rsplit("/", 1)[-1]).strip("-.")[:60] or "image"
    return f"ibrun-{base}-{secrets.token_hex(3)}"


def _dev_access(req: RunRequest, info: ImageInfo) -> devaccess.Access | None:
    """The dev servers asked for (--jupyter, --ssh, --vscode; several run side by side in one container), or None."""
    servers = [o for o, asked in (("--jupyter", req.jupyter), ("--ssh", req.ssh), ("--vscode", req.vscode)) if asked]
    if (req.port is not None or req.ssh_key) and not servers:
        raise UsageError("--port and --ssh-key go with --jupyter, --ssh or --vscode")
    if req.ssh_key and not req.ssh:
        raise UsageError("--ssh-key goes with --ssh")
    if not servers:
        return None
    option = " ".join(servers)
    if req.port is not None and len(servers) > 1:
        raise UsageError(f"--port goes with one server; {option} each get a free port (leave --port out)")
    if info.flavor != "dev":
        found = f"a {info.flavor} image" if info.flavor else "not an imagebuild image (no io.imagebuild.flavor)"
        raise UsageError(f"{option} needs a dev image (JupyterLab, sshd and VS Code live there): {info.ref} is "
                         f"{found}; use the dev flavor (--matrix M --flavor dev)")
    if req.vscode and not info.labels.get(devaccess.VSCODE_LABEL):
        raise UsageError(f"--vscode: {info.ref} is a dev image without VS Code (no {devaccess.VSCODE_LABEL} label); "
                         "build it from a matrix with `vscode: true`, or use --jupyter/--ssh")
    if req.command:
        raise UsageError(f"{option} runs its own server: give no command after the image")
    taken: list[int] = []

    def port() -> int:
        taken.append(devaccess.check_port(req.port) if req.port is not None else devaccess.free_port(tuple(taken)))
        return taken[-1]

    accesses: list[devaccess.Access] = []
    if req.jupyter:
        accesses.append(devaccess.jupyter(port(), as_root=req.caller[0] == 0))
    if req.ssh:
        keys, _ = devaccess.public_keys(req.ssh_key, req.home)
        accesses.append(devaccess.ssh(port(), keys, login_uid=info.user_uid() or 1000, caller=req.caller))
    if req.vscode:
        accesses.append(devaccess.vscode(port(), WORKSPACE))
    return devaccess.combine(accesses)


def make_launch(req: RunRequest, info: ImageInfo, topo: Topology, *, engine_has_gpus: bool,
                mem_bytes: int | None) -> Launch:
    notes: list[str] = []
    access = _dev_access(req, info)
    if req.shm_size is not None and not _SIZE.match(req.shm_size):
        raise UsageError(f"--shm-size {req.shm_size!r}: want a size such as 16g or 512m")
    if req.ipc_host and req.shm_size is not None:
        raise UsageError("--ipc-host shares the host's /dev/shm: --shm-size does not apply")

    selection = select_gpus(req.gpus, topo, engine_has_gpus)
    if selection.note:
        notes.append(selection.note)
    placement = place(selection.gpus, topo) if req.numa else None
    if placement and placement.note:
        notes.append(placement.note)

    env = dict(req.env)
    uid, gid = req.caller
    user = f"{uid}:{gid}"
    image_uid = info.user_uid()
    if uid not in (0, image_uid) and "HOME" not in env:
        env["HOME"] = "/tmp/home"  # a UID without a passwd entry in the image would get HOME=/ (not writable)
    if access is not None:
        env.update(access.environment)
        if access.run_as_root:
            user = "0:0"
    mounts: tuple[tuple[str, str, str], ...] = ()
    if req.workspace is not None:
        if not req.workspace.is_dir():
            raise UsageError(f"--workspace {req.workspace}: not a directory")
        mounts = ((str(req.workspace.resolve()), WORKSPACE, "rw"),)
    interactive = req.interactive and access is None
    settings = ContainerSettings(
        image=info.id,
        name=req.name or _container_name(info),
        command=list(access.command if access else req.command),
        gpus=selection.request,
        ipc_host=req.ipc_host,
        shm_size=req.shm_size or shm_size_for(mem_bytes),
        network="host",  # Jupyter/sshd/code-server listen on the host's 127.0.0.1; never a bridge network
        labels={RUN_LABEL: "1"},
        gpu_ids=selection.device_ids,
        cpuset_cpus=placement.cpus if placement else None,
        cpuset_mems=placement.mems if placement else None,
        mounts=mounts,
        user=user,
        environment=env,
        tty=interactive,
        stdin_open=interactive,
        working_dir=WORKSPACE,
    )
    return Launch(settings, notes, access)
