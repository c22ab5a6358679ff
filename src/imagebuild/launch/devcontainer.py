"""`imagebuild devcontainer`: a dev image's `imagebuild run` settings as `.devcontainer/devcontainer.json`, so the
Dev Containers CLI / VS Code start it the way `run` does: GPUs, --ipc=host or a sized /dev/shm, memlock/stack
ulimits, NUMA pinning, host networking, the project folder at /workspace.

Pure functions (no engine here): `config()` maps a launch spec (spec.make_launch's ContainerSettings) to the JSON
document; `image_reference()` binds it to bytes (a registry digest the engine holds, else the image ID, never a tag
resolved again); `login_user()` names the image's user from its /etc/passwd; `ulimits_after_probe()` reads what a
probe container was given. The command (commands/devcontainer.py) asks the engine and writes the file."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from imagebuild.engine import ContainerSettings
from imagebuild.launch.spec import WORKSPACE

LABEL = "io.imagebuild.devcontainer"  # on every container the Dev Containers CLI starts from the file
JUPYTER_PORT = 8888
MEMLOCK_CHOICES = ("auto", "unlimited", "default")


def image_reference(image_id: str, repo_digests: list[str] | tuple[str, ...]) -> str:
    """REPO@sha256:… when the engine holds the image under a registry digest (pullable elsewhere, same bytes), else
    the image ID itself: either names these bytes and nothing else."""
    digests = sorted(d for d in repo_digests if "@sha256:" in d)
    return digests[0] if digests else image_id


def login_user(passwd: str, image_user: str) -> str:
    """The image's USER as a name (the Dev Containers CLI matches remoteUser against /etc/passwd by name): a name is
    kept, a numeric UID is looked up in the image's /etc/passwd; "" (root) is root. ValueError when the UID has no
    passwd entry."""
    uid = image_user.split(":", 1)[0]
    if not uid:
        return "root"
    if not uid.isdigit():
        return uid
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2] == uid:
            return fields[0]
    raise ValueError(f"the image's USER {image_user} has no entry in its /etc/passwd")


def ulimits_after_probe(host_config: dict[str, Any]) -> dict[str, int]:
    """The ulimits a started container really got (its inspected HostConfig.Ulimits): name -> soft limit."""
    return {u["Name"]: int(u["Soft"]) for u in host_config.get("Ulimits") or []}


def run_args(settings: ContainerSettings) -> list[str]:
    """`docker run` arguments for the engine-level settings only: GPUs, IPC//dev/shm, ulimits, cpusets, network,
    platform, the label. The same code as `imagebuild run --print` (ContainerSettings.docker_run_args); the name,
    user, mounts, working directory, environment and image are devcontainer.json's own keys."""
    bare = replace(settings, name="-", command=[], mounts=(), user=None, working_dir=None, environment={},
                   labels={LABEL: "1"}, tty=False, stdin_open=False, image="-")
    args = bare.docker_run_args(remove=False)
    assert args[:4] == ["docker", "run", "--name", "-"] and args[-1] == "-", args
    return args[4:-1]


def config(settings: ContainerSettings, *, image: str, remote_user: str, ports: tuple[int, ...], name: str,
           source: dict[str, str]) -> dict[str, Any]:
    """devcontainer.json for `settings` (a dev image's launch spec), the image bound as `image`. `source` is recorded
    under customizations.imagebuild (what the file was made from, and the memlock choice)."""
    doc: dict[str, Any] = {
        "name": name,
        "image": image,
        "runArgs": run_args(settings),
        "remoteUser": remote_user,
        # the Dev Containers CLI gives remoteUser the caller's UID/GID (a derived image) so /workspace files are theirs
        "updateRemoteUserUID": True,
        "workspaceMount": f"source=${{localWorkspaceFolder}},target={WORKSPACE},type=bind",
        "workspaceFolder": WORKSPACE,
    }
    if settings.environment:
        doc["containerEnv"] = dict(settings.environment)
    if ports:
        doc["forwardPorts"] = list(ports)
        doc["portsAttributes"] = {str(p): {"label": "JupyterLab (jupyter lab --port 8888)" if p == JUPYTER_PORT
                                           else f"port {p}"} for p in ports}
    doc["customizations"] = {"imagebuild": dict(source)}
    return doc
