"""`imagebuild devcontainer`: write `.devcontainer/devcontainer.json` for a dev image, with the settings `imagebuild
run` uses (launch/spec.py) and the image bound by digest or ID (launch/devcontainer.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from imagebuild.errors import UsageError

PROBE_NAME = "ibdc-ulimit-probe"


def _probe_ulimits(client: Any, image_id: str, settings: Any) -> tuple[dict[str, int], list[str]]:
    """Start (and remove) one throwaway container of the image with the spec's ulimits, as `run` would (the engine
    may refuse memlock=-1 without CAP_SYS_RESOURCE: containers.start then drops it and says so): the ulimits the
    engine really gave it, and the start's notes."""
    from imagebuild.engine import ContainerSettings, containers
    from imagebuild.launch.devcontainer import LABEL, ulimits_after_probe

    probe = ContainerSettings(image=image_id, name=f"{PROBE_NAME}-{os.urandom(3).hex()}", command=["true"],
                              memlock_unlimited=settings.memlock_unlimited, stack_bytes=settings.stack_bytes,
                              network="none", labels={LABEL: "probe"})
    extra: dict[str, Any] = {}
    container, err = containers.start(client, probe.kwargs(), extra)
    try:
        if container is None:
            raise UsageError(f"the engine would not start {image_id[:19]} to probe its ulimits: {err}; choose with "
                             "--memlock unlimited|default instead of probing")
        container.reload()
        return ulimits_after_probe(container.attrs.get("HostConfig") or {}), list(extra.get("notes", []))
    finally:
        if container is not None:
            containers.remove(container)


def _memlock(choice: str, client: Any, image_id: str, settings: Any,
             echo: Callable[[str], None]) -> tuple[Any, str]:
    """The settings with the memlock (and stack) ulimits this engine takes, and the one line that says which."""
    if choice == "unlimited":
        return (replace(settings, memlock_unlimited=True),
                "memlock: unlimited (--memlock unlimited, not probed: an engine without CAP_SYS_RESOURCE will "
                "refuse to start the container)")
    if choice == "default":
        return (replace(settings, memlock_unlimited=False),
                "memlock: the engine's default (--memlock default: no --ulimit memlock in runArgs)")
    got, notes = _probe_ulimits(client, image_id, replace(settings, memlock_unlimited=True))
    memlock_ok = got.get("memlock") == -1
    settings = replace(settings, memlock_unlimited=memlock_ok)
    if settings.stack_bytes and got.get("stack") != settings.stack_bytes:
        echo(f"stack: the engine's default (this engine refused --ulimit stack={settings.stack_bytes} in a probe "
             "container)")
        settings = replace(settings, stack_bytes=None)
    if memlock_ok:
        return settings, "memlock: unlimited (this engine accepted --ulimit memlock=-1 in a probe container)"
    how = "refused" if any("memlock" in n for n in notes) else "did not apply"
    return settings, (f"memlock: the engine's default (this engine {how} --ulimit memlock=-1 in a probe container); "
                      "pinned-memory transfers (NCCL, RDMA) may be limited; --memlock unlimited writes it anyway")


@click.command("devcontainer", context_settings={"allow_interspersed_args": True})
@click.argument("image", required=False, metavar="[IMAGE]")
@click.option("--matrix", "-m", metavar="FILE", help="the dev image of this matrix instead of an IMAGE")
@click.option("--only", help="with --matrix: narrow to one variant (id/tag/variant substring or glob)")
@click.option("--registry", default=None, help="with --matrix: registry prefix the plan's tags carry")
@click.option("--output", "-o", "output", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="project folder: the file goes to OUTPUT/.devcontainer/devcontainer.json")
@click.option("--force", is_flag=True, help="replace an existing devcontainer.json")
@click.option("--gpus", default="all", show_default=True, metavar="all|none|LIST",
              help="GPU indexes, GPU-/MIG- UUIDs, comma-separated (as imagebuild run)")
@click.option("--ipc-host", is_flag=True, help="share the host's IPC namespace and /dev/shm (--ipc=host)")
@click.option("--shm-size", metavar="SIZE", help="/dev/shm size (default: half the host's memory)")
@click.option("--no-numa", is_flag=True, help="do not pin CPUs/memory to the selected GPUs' NUMA node")
@click.option("--env", "-e", "env", multiple=True, metavar="KEY=VALUE", help="containerEnv entry; repeatable")
@click.option("--port", "ports", type=int, multiple=True, metavar="PORT",
              help="forwarded port; repeatable (default: 8888, JupyterLab)")
@click.option("--memlock", type=click.Choice(["auto", "unlimited", "default"]), default="auto", show_default=True,
              help="--ulimit memlock=-1 in runArgs: auto probes this engine once with a throwaway container")
def command(image: str | None, matrix: str | None, only: str | None, registry: str | None, output: Path,
            force: bool, gpus: str, ipc_host: bool, shm_size: str | None, no_numa: bool, env: Sequence[str],
            ports: Sequence[int], memlock: str) -> int:
    """Write OUTPUT/.devcontainer/devcontainer.json for a dev IMAGE (or the --matrix's dev image): the image by
    registry digest or image ID, remoteUser, the run arguments of `imagebuild run` (GPUs, --ipc/--shm-size,
    ulimits, NUMA), host networking, forwarded ports and the project folder at /workspace.

    \b
    Examples:
      imagebuild devcontainer --matrix images/cpu.yaml
      imagebuild devcontainer registry/pytorch:2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-dev --gpus 0,1
      devcontainer up --workspace-folder . && devcontainer exec --workspace-folder . python -c 'import torch'
    """
    from imagebuild.commands.run import ROOT_ENV, _env_pairs, _host_facts, _image
    from imagebuild.launch.spec import RunRequest, make_launch

    def echo(msg: str) -> None:
        click.echo(msg, err=True)

    if matrix and image:
        raise UsageError(f"give an IMAGE or --matrix FILE, not both ({image} and --matrix {matrix})")
    if not matrix and not image:
        raise UsageError("give a dev IMAGE (tag, reference or ID) or --matrix FILE")
    if not matrix and (only or registry is not None):
        raise UsageError("--only and --registry go with --matrix")
    for port in ports:
        if not 1 <= port <= 65535:
            raise UsageError(f"--port {port}: not a TCP port (1-65535)")
    target = output / ".devcontainer" / "devcontainer.json"
    if target.exists() and not force:  # checked first: nothing is asked of the engine for a file we would not write
        raise UsageError(f"{target} exists: leaving it as it is; --force replaces it (or --output DIR elsewhere)")
    if output.exists() and not output.is_dir():
        raise UsageError(f"--output {output}: not a directory")
    env_pairs = _env_pairs(env)
    from imagebuild.engine import connect, host_has_gpus
    from imagebuild.engine.store import as_store

    client = connect("smoke")
    info = _image(client, image, matrix, "dev" if matrix else None, only, registry, echo)
    if info.flavor != "dev":
        found = f"a {info.flavor} image" if info.flavor else "not an imagebuild image (no io.imagebuild.flavor label)"
        raise UsageError(f"devcontainer needs a dev image (JupyterLab, sshd, compilers): {info.ref} is {found}; "
                         "choices: a -dev tag, or --matrix FILE (its dev image)")
    from imagebuild.host import host_root
    from imagebuild.launch.devcontainer import JUPYTER_PORT, config, image_reference, login_user

    topo, mem = _host_facts(host_root(Path(os.environ.get(ROOT_ENV) or "/"), f"${ROOT_ENV}"))
    uid = info.user_uid() or 0
    req = RunRequest(gpus=gpus, ipc_host=ipc_host, shm_size=shm_size, numa=not no_numa, workspace=None,
                     env=env_pairs, caller=(uid, uid))
    launch = make_launch(req, info, topo, engine_has_gpus=bool(topo.gpus) or host_has_gpus(client), mem_bytes=mem)
    for note in launch.notes:
        echo(note)
    store = as_store(client)
    inspected = store.inspect(info.id) or {}
    bound = image_reference(info.id, inspected.get("RepoDigests") or [])
    try:
        passwd = _passwd(store.copy_out(info.id, "/etc/passwd"))
        user = login_user(passwd, info.user)
    except (ValueError, OSError, KeyError) as exc:
        raise UsageError(f"{info.ref}: cannot name its user for remoteUser: {exc}") from None
    settings, memlock_line = _memlock(memlock, client, info.id, launch.settings, echo)
    echo(memlock_line)
    doc = config(settings, image=bound, remote_user=user, ports=tuple(ports) or (JUPYTER_PORT,),
                 name=info.labels.get("org.opencontainers.image.title") or info.ref.rsplit("/", 1)[-1],
                 source={"ref": info.ref, "imageId": info.id,
                         "memlock": "unlimited" if settings.memlock_unlimited else "default",
                         "memlockChoice": memlock})
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    part.write_text(json.dumps(doc, indent=2) + "\n")
    part.replace(target)
    click.echo(f"wrote {target} ({bound if bound != info.id else 'image ID ' + info.id}, remoteUser {user})")
    echo(f"then: devcontainer up --workspace-folder {output}")
    return 0


def _passwd(archive: bytes) -> str:
    """/etc/passwd out of copy_out's tar (one member)."""
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            if member.isfile():
                fh = tar.extractfile(member)
                if fh is not None:
                    return fh.read().decode("utf-8", "replace")
    raise ValueError("its /etc/passwd is not a file")
