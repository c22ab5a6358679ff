"""Connect to whatever Docker engine `docker.from_env()` reaches; never assume a local socket."""

from __future__ import annotations

import os

from imagebuild.errors import EngineUnavailable

DEFAULT_TIMEOUT = 900  # seconds; the SDK's 60 s default is too short for big imports, commits and pushes
START_HINT = "start one with scripts/docker-engine.sh (or set DOCKER_HOST to an engine that answers)"


def describe_host() -> str:
    host = os.environ.get("DOCKER_HOST")
    return f"DOCKER_HOST={host}" if host else "the default socket unix:///var/run/docker.sock"


def connect(timeout: int = DEFAULT_TIMEOUT):
    """A `docker.DockerClient` that has answered a ping; `EngineUnavailable` (one line) otherwise."""
    import docker

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as exc:  # DockerException, requests errors, socket errors, bad DOCKER_HOST values
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if len(reason) > 160:
            reason = reason[:157] + "..."
        raise EngineUnavailable(f"no Docker engine answers at {describe_host()} ({reason}); {START_HINT}") from None
    return client


def local_root_dir(client) -> str | None:
    """The engine's data-root when it is on this machine (unix socket and the path exists here), else None."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None
    try:
        root = client.info().get("DockerRootDir")
    except Exception:
        return None
    return root if root and os.path.isdir(root) else None
