"""How our containers are started: the launch settings users need for PyTorch (GPUs, a big /dev/shm or the host's
IPC namespace, memlock/stack ulimits, the network) in one dataclass, and a start/remove pair that tracks every
container it created so none outlives the process.

Shared by the smoke runner (which starts each image the way its users run it) and anything else that starts an
image. NCCL and DataLoader workers fail on Docker's 64 MB /dev/shm, hence the defaults.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

SHM_SIZE = "2g"
STACK_BYTES = 67108864  # 64 MiB: what NVIDIA's images recommend (`--ulimit stack=67108864`)
NO_GPU_ENV = "IMAGEBUILD_SMOKE_GPUS"  # "0"/"no"/"none"/"false": never request GPUs

_LIVE: dict[str, Container] = {}  # container id -> container, removed at exit if still around
_LIVE_LOCK = threading.Lock()


@dataclass(frozen=True)
class ContainerSettings:
    """One container's launch settings; `kwargs()` is what `client.containers.create` takes."""

    image: str
    name: str
    command: list[str] = field(default_factory=lambda: ["sleep", "infinity"])  # the entrypoint (tini) stays PID 1
    gpus: bool = False  # all GPUs (`--gpus all`)
    ipc_host: bool = False  # `--ipc=host`, else a SHM_SIZE /dev/shm
    shm_size: str = SHM_SIZE
    memlock_unlimited: bool = True
    stack_bytes: int | None = STACK_BYTES
    network: str = "none"  # "none" or "host": never a bridge network
    labels: dict[str, str] = field(default_factory=dict)
    # `imagebuild run` (launch/): which GPUs, CPU/memory pinning, mounts, user, environment, a terminal
    gpu_ids: tuple[str, ...] = ()  # with gpus: these devices (indexes, GPU-/MIG- UUIDs); empty = all
    cpuset_cpus: str | None = None  # "0-55,112-167"
    cpuset_mems: str | None = None  # "0"
    mounts: tuple[tuple[str, str, str], ...] = ()  # (host path, container path, "rw"|"ro")
    user: str | None = None  # "UID:GID"; None: the image's user
    environment: dict[str, str] = field(default_factory=dict)
    tty: bool = False  # `-t`
    stdin_open: bool = False  # `-i`
    working_dir: str | None = None
    platform: str | None = None  # the image's own OS/architecture when it is not the engine's (run under QEMU)

    def kwargs(self) -> dict[str, Any]:
        import docker

        ulimits = []
        if self.memlock_unlimited:
            ulimits.append(docker.types.Ulimit(name="memlock", soft=-1, hard=-1))
        if self.stack_bytes:
            ulimits.append(docker.types.Ulimit(name="stack", soft=self.stack_bytes, hard=self.stack_bytes))
        kw: dict[str, Any] = {
            "image": self.image,
            "command": list(self.command) or None,  # none: the image's CMD
            "name": self.name,
            "detach": True,
            "network_mode": self.network,
            "ulimits": ulimits,
            "labels": dict(self.labels),
        }
        if self.user is not None:
            kw["user"] = self.user
        if self.ipc_host:
            kw["ipc_mode"] = "host"
        else:
            kw["shm_size"] = self.shm_size
        if self.gpus:
            kw["device_requests"] = [
                docker.types.DeviceRequest(device_ids=list(self.gpu_ids), capabilities=[["gpu"]]) if self.gpu_ids
                else docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])
            ]
        if self.cpuset_cpus:
            kw["cpuset_cpus"] = self.cpuset_cpus
        if self.cpuset_mems:
            kw["cpuset_mems"] = self.cpuset_mems
        if self.mounts:
            kw["volumes"] = {host: {"bind": path, "mode": mode} for host, path, mode in self.mounts}
        if self.environment:
            kw["environment"] = dict(self.environment)
        if self.tty:
            kw["tty"] = True
        if self.stdin_open:
            kw["stdin_open"] = True
        if self.working_dir:
            kw["working_dir"] = self.working_dir
        if self.platform:
            kw["platform"] = self.platform
        return kw

    def docker_run_args(self, *, remove: bool = True) -> list[str]:
        """The same settings as `docker run` arguments (what `imagebuild run --print` shows): one source for both."""
        args = ["docker", "run"]
        if remove:
            args.append("--rm")
        if self.stdin_open:
            args.append("-i")
        if self.tty:
            args.append("-t")
        args += ["--name", self.name]
        if self.gpus:
            args += ["--gpus", f'"device={",".join(self.gpu_ids)}"' if self.gpu_ids else "all"]
        args += ["--ipc=host"] if self.ipc_host else [f"--shm-size={self.shm_size}"]
        if self.memlock_unlimited:
            args += ["--ulimit", "memlock=-1"]
        if self.stack_bytes:
            args += ["--ulimit", f"stack={self.stack_bytes}"]
        if self.cpuset_cpus:
            args.append(f"--cpuset-cpus={self.cpuset_cpus}")
        if self.cpuset_mems:
            args.append(f"--cpuset-mems={self.cpuset_mems}")
        args.append(f"--network={self.network}")
        for host, path, mode in self.mounts:
            args += ["-v", f"{host}:{path}" + (":ro" if mode == "ro" else "")]
        if self.working_dir:
            args += ["-w", self.working_dir]
        if self.platform:
            args += ["--platform", self.platform]
        if self.user:
            args += ["--user", self.user]
        for key, value in self.environment.items():
            args += ["-e", f"{key}={value}"]
        for key, value in self.labels.items():
            args += ["--label", f"{key}={value}"]
        return [*args, self.image, *self.command]


def host_has_gpus(client: docker.DockerClient) -> bool:
    """Does the engine's host have NVIDIA GPUs we can request?"""
    if os.environ.get(NO_GPU_ENV, "").lower() in ("0", "no", "none", "false"):
        return False
    try:
        runtimes = (client.info() or {}).get("Runtimes") or {}
    except Exception:
        runtimes = {}
    return "nvidia" in runtimes or os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None


def remove(container: Container) -> str | None:
    """Remove (force, with volumes) and forget a tracked container; the error text, or None when it is gone."""
    cid = getattr(container, "id", None)
    try:
        container.remove(force=True, v=True)
        err = None
    except Exception as exc:
        if "No such container" in str(exc) or getattr(exc, "status_code", None) == 404:
            err = None
        else:
            err = str(exc)
    with _LIVE_LOCK:
        _LIVE.pop(str(cid), None)
    return err


@atexit.register
def remove_leftovers() -> None:
    with _LIVE_LOCK:
        left = list(_LIVE.values())
    for c in left:
        remove(c)


def start(client: docker.DockerClient, kw: dict[str, Any], extra: dict[str, Any],
          before_start: Callable[[Container], None] | None = None) -> tuple[Container | None, str | None]:
    """Create + start (so a container that fails to start is still ours to remove): (container, None) or
    (None, error). An engine that may not raise memlock/stack limits (rootless, user namespaces) or has no GPU
    runtime gets another try without them, noted in `extra["notes"]` (and `extra["gpus_requested"] = False`).
    `before_start(container)` runs between create and start (e.g. to attach to its terminal before output flows)."""
    import docker

    kw = dict(kw)
    kw.pop("detach", None)
    for _ in range(4):
        container = client.containers.create(**kw)
        with _LIVE_LOCK:
            _LIVE[str(container.id)] = container
        try:
            if before_start is not None:
                before_start(container)
            container.start()
            return container, None
        except docker.errors.APIError as exc:
            remove(container)
            msg = str(exc)
            notes = extra.setdefault("notes", [])
            if "rlimit" in msg and kw.get("ulimits"):
                dropped = kw["ulimits"][0]
                kw["ulimits"] = kw["ulimits"][1:]
                notes.append(f"engine refused ulimit {dropped['Name']}={dropped['Soft']}: ran without it")
                continue
            if kw.get("device_requests") and ("device driver" in msg or "nvidia" in msg.lower()):
                kw.pop("device_requests")
                extra["gpus_requested"] = False
                notes.append(f"GPU request failed ({msg[:200]}): ran without GPUs")
                continue
            return None, msg
        except BaseException:  # Ctrl-C or a failing before_start: the half-started container goes too
            remove(container)
            raise
    return None, "gave up after retries"


class Interrupted(KeyboardInterrupt):
    """SIGTERM/SIGHUP while one of our containers runs (handled like Ctrl-C: the container is removed)."""


@contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM/SIGHUP raise Interrupted (main thread only), so `finally` blocks remove the container; the smoke
    runner and `imagebuild run` share it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(f"signal {signum}")

    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def attach_output(client: docker.DockerClient, container_id: str) -> Iterator[tuple[bytes | None, bytes | None]]:
    """The container's (stdout, stderr) chunks as they come (attach before the start: no output is missed)."""
    stream: Iterator[tuple[bytes | None, bytes | None]] = client.api.attach(
        container_id, stdout=True, stderr=True, stream=True, demux=True)
    return stream


def attach_terminal(client: docker.DockerClient, container_id: str) -> Any:
    """A socket wired to the container's terminal (stdin, stdout and stderr)."""
    return client.api.attach_socket(container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})


def resize_terminal(client: docker.DockerClient, container_id: str, lines: int, columns: int) -> None:
    client.api.resize(container_id, height=lines, width=columns)
