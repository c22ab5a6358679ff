"""The one place that connects to a Docker engine: whatever `docker.from_env()` reaches (DOCKER_HOST or the default
socket), never an assumed local socket, with a read timeout chosen by what the connection is for.

The SDK's 60 s default read timeout is too short for our work: committing a multi-GB pip layer, importing a
bootstrapped rootfs or uploading a layer can keep one HTTP response silent for many minutes. Each caller names its
purpose instead of a number, so the figures live here and nowhere else.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal, cast

from imagebuild.engine.stream import EngineError
from imagebuild.engine.unix import EngineSocket, LazyClient, socket_path
from imagebuild.errors import EngineUnavailable

if TYPE_CHECKING:
    import docker

Purpose = Literal["build", "push", "smoke", "inspect"]

TIMEOUTS: dict[str, int] = {
    "build": 1800,  # commits of multi-GB layers, loading a bootstrapped rootfs; `build --push` pushes on this client
    "push": 1800,  # one layer upload is one silent response
    "smoke": 600,  # container create/start/exec/remove
    "inspect": 120,  # image/registry look-ups only
}
START_HINT = "start one with scripts/docker-engine.sh (or set DOCKER_HOST to an engine that answers)"


def describe_host() -> str:
    host = os.environ.get("DOCKER_HOST")
    return f"DOCKER_HOST={host}" if host else "the default socket unix:///var/run/docker.sock"


def connect(purpose: Purpose = "build", *, timeout: int | None = None, lazy: bool = False) -> docker.DockerClient:
    """A `docker.DockerClient` that has answered a ping; `EngineUnavailable` (one line) otherwise.

    `timeout` overrides the purpose's read timeout (tests use short ones). `lazy` (a build run): on a unix socket,
    a client whose image store asks the engine over the socket itself and which makes the SDK client on first use
    of anything else (unix.py: a no-op build never loads the SDK); the engine has answered its /version."""
    seconds = timeout if timeout is not None else TIMEOUTS[purpose]
    path = socket_path() if lazy else None
    try:
        if path is not None:
            engine = EngineSocket(path, seconds)
            engine.negotiate()
            return cast("docker.DockerClient", LazyClient(engine, seconds))
        import docker

        client = docker.from_env(timeout=seconds)
        client.ping()
    except Exception as exc:  # DockerException, requests errors, socket errors, bad DOCKER_HOST values
        said: BaseException = exc
        if isinstance(exc, EngineError) and exc.connection and exc.__cause__ is not None:
            said = exc.__cause__  # the socket's own words (unix.py): the line below already names the host
        reason = str(said).splitlines()[0] if str(said) else type(said).__name__
        if len(reason) > 160:
            reason = reason[:157] + "..."
        raise EngineUnavailable(f"no Docker engine answers at {describe_host()} ({reason}); {START_HINT}") from None
    return client


def engine_machine(client: docker.DockerClient) -> str | None:
    """The engine's CPU architecture as `uname -m` says it (x86_64, aarch64): the platform the classic builder
    builds and a container runs natively. None when the engine does not say."""
    try:
        arch = client.info().get("Architecture")
    except Exception:
        return None
    return arch if isinstance(arch, str) and arch else None


def local_root_dir(client: docker.DockerClient) -> str | None:
    """The engine's data-root when it is on this machine (unix socket and the path exists here), else None."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None
    try:
        root = client.info().get("DockerRootDir")
    except Exception:
        return None
    return root if isinstance(root, str) and root and os.path.isdir(root) else None
