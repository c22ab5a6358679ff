"""`imagebuild run`: start an image with the GPU, /dev/shm, ulimit and NUMA settings PyTorch needs (see launch/)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from imagebuild.commands._options import verify_key_option
from imagebuild.errors import UsageError
from imagebuild.pasteable import shell_join

if TYPE_CHECKING:
    from imagebuild.host import Topology
    from imagebuild.launch.image import ImageInfo

ROOT_ENV = "IMAGEBUILD_HOST_ROOT"  # read GPUs/NUMA/memory under this root instead of / (recorded trees, tests)


def _env_pairs(values: Iterable[str]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not key.strip():
            raise UsageError(f"--env {item!r}: want KEY=VALUE (or KEY to pass the caller's value)")
        out[key.strip()] = value if sep else os.environ.get(key.strip(), "")
    return out


def _host_facts(root: Path) -> tuple[Topology, int | None]:
    """The host's GPU/NUMA topology and memory size (under IMAGEBUILD_HOST_ROOT: a recorded tree)."""
    from imagebuild.host import mem_total_bytes, nvidia_smi_outputs, read_topology

    return read_topology(root, **nvidia_smi_outputs(root)), mem_total_bytes(root)


def _image(client: Any, ref: str | None, matrix: str | None, flavor: str | None, only: str | None,
           registry: str | None, echo: Callable[[str], None]) -> ImageInfo:
    from imagebuild.launch import image as launch_image
    from imagebuild.pipeline.loaded import load
    from imagebuild.pipeline.located import locate

    if not matrix:
        return launch_image.inspect(client, cast(str, ref))  # command(): no --matrix, so a REF
    planned = load(matrix, registry, None, None, echo)
    path = planned.path
    row = launch_image.pick(planned.plan, cast(str, flavor), only, str(path))  # command(): --matrix needs --flavor
    here = locate(client, row, planned.record)  # the record's image for exactly these inputs
    if here.image_id is None:
        raise UsageError(f"{path}: {row.id} is not built here ({here.why}); build it with "
                         f"`imagebuild build --matrix {matrix} --only {row.id}`")
    info = replace(launch_image.inspect(client, here.image_id), ref=row.tag)  # runs the ID, shows the tag
    echo(f"image: {row.tag} ({here.image_id[:19]})")
    return info


def _verify_first(client: Any, info: ImageInfo, verify_key: str | None, echo: Callable[[str], None]) -> str | None:
    """With a verify key configured: the image's reference verified, and the engine's image is that digest's; the
    verified REPO@DIGEST (None without a key)."""
    from imagebuild.sign import configured_public_key

    public = configured_public_key(verify_key)
    if public is None:
        return None
    from imagebuild.engine.store import as_store
    from imagebuild.sign.verify import check_image

    verified = check_image(info.ref, public, inspect=as_store(client).inspect(info.id) or {"Id": info.id})
    echo(f"verified: {verified.digest_ref} (signature + SBOM + provenance, key {public.describe()})")
    return verified.digest_ref


def _refuse_options_after_ref(args: list[str], ref: str | None) -> None:
    """Everything after REF goes to the container, so `run REF --jupyter` would start the image with `--jupyter` as
    its command. A container command never starts with a dash: such a word right after REF is a misplaced option."""
    if not args or args[0] == "--" or not args[0].startswith("-"):
        return
    word = args[0].split("=", 1)[0]
    own = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    what = f"{word} is an option of imagebuild run" if word in own else f"{word} comes"
    raise UsageError(f"{what} after the image {ref}: put options before REF, or after `--` to pass them to the "
                     "container")


@click.command("run", context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--matrix", "-m", metavar="FILE", help="run this matrix's image of --flavor instead of a REF")
@click.option("--flavor", type=click.Choice(["base", "runtime", "dev"]), help="with --matrix: which image")
@click.option("--only", help="with --matrix: narrow to one variant (id/tag/variant substring or glob)")
@click.option("--registry", default=None, help="with --matrix: registry prefix the plan's tags carry")
@click.option("--gpus", default="all", show_default=True, metavar="all|none|LIST",
              help="GPU indexes, GPU-/MIG- UUIDs, comma-separated (nvidia-smi -L lists them)")
@click.option("--ipc-host", is_flag=True, help="share the host's IPC namespace and /dev/shm (--ipc=host)")
@click.option("--shm-size", metavar="SIZE", help="/dev/shm size (default: half the host's memory)")
@click.option("--no-numa", is_flag=True, help="do not pin CPUs/memory to the selected GPUs' NUMA node")
@click.option("--workspace", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="directory mounted at /workspace (default: the current one)")
@click.option("--no-workspace", is_flag=True, help="mount nothing at /workspace")
@click.option("--env", "-e", "env", multiple=True, metavar="KEY=VALUE", help="environment variable; repeatable")
@click.option("--name", help="container name (default: ibrun-<image>-<random>)")
@click.option("--jupyter", is_flag=True, help="dev images: JupyterLab on 127.0.0.1 with a fresh token")
@click.option("--ssh", is_flag=True, help="dev images: key-only sshd on 127.0.0.1 with your public key")
@click.option("--vscode", is_flag=True, help="dev images built with `vscode:`: VS Code (code-server) on 127.0.0.1 "
              "with a fresh password; --jupyter, --ssh and --vscode can be combined (one container, one line each)")
@click.option("--port", type=int, help="with one of --jupyter/--ssh/--vscode: the port (default: a free one)")
@click.option("--ssh-key", type=click.Path(dir_okay=False, path_type=Path),
              help="with --ssh: public key file (default: ~/.ssh/*.pub)")
@click.option("--print", "print_only", is_flag=True, help="print the equivalent `docker run` line, start nothing")
@click.option("--ignore-driver", is_flag=True, help="start even when this host's NVIDIA driver is older than the "
              "image's io.imagebuild.min-driver label")
@verify_key_option
def command(args: Sequence[str], matrix: str | None, flavor: str | None, only: str | None, registry: str | None,
            gpus: str, ipc_host: bool, shm_size: str | None, no_numa: bool, workspace: Path | None,
            no_workspace: bool, env: tuple[str, ...], name: str | None, jupyter: bool, ssh: bool, port: int | None,
            ssh_key: Path | None, print_only: bool, verify_key: str | None, ignore_driver: bool = False,
            vscode: bool = False) -> int:
    """Start IMAGE (or the matrix's image of --flavor) with GPUs, a big /dev/shm, memlock/stack ulimits, NUMA
    pinning, the current directory at /workspace as your UID/GID; removed on exit.

    \b
    Examples:
      imagebuild run registry/pytorch:2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-runtime -- python train.py
      imagebuild run --matrix images/h100.yaml --flavor dev --gpus 0,1
      imagebuild run --matrix images/cpu.yaml --flavor dev --jupyter
      imagebuild run --matrix M --flavor dev --jupyter --ssh --vscode   # M with `vscode: true`
      imagebuild run --print IMAGE -- torchrun --nproc-per-node 8 train.py
      imagebuild run --verify-key cosign.pub registry/pytorch:2.9.1-...-runtime -- python train.py

    With --verify-key (or IMAGEBUILD_VERIFY_KEY) the image's registry digest must be signed with that key and carry
    its SBOM and provenance attestations, and the engine's image must be that digest's: else nothing starts.
    """
    from imagebuild.launch.spec import RunRequest, make_launch

    def echo(msg: str) -> None:
        click.echo(msg, err=True)

    args = list(args)
    if args and args[0].startswith("-") and args[0] != "--":
        raise UsageError(f"no such option: {args[0]} (options go before the image)")
    if matrix:
        if not flavor:
            raise UsageError("--matrix needs --flavor base|runtime|dev")
        ref = None
    else:
        if flavor or only or registry is not None:
            raise UsageError("--flavor, --only and --registry go with --matrix")
        if not args or args[0] == "--":
            raise UsageError("give an IMAGE (tag, reference or ID) or --matrix FILE --flavor F")
        ref = args.pop(0)
    _refuse_options_after_ref(args, ref)
    if args and args[0] == "--":
        args.pop(0)
    if no_workspace and workspace:
        raise UsageError("--workspace and --no-workspace: pick one")
    req = RunRequest(
        command=tuple(args), gpus=gpus, ipc_host=ipc_host, shm_size=shm_size, numa=not no_numa,
        workspace=None if no_workspace else (workspace or Path.cwd()), env=_env_pairs(env), name=name,
        jupyter=jupyter, ssh=ssh, vscode=vscode, port=port, ssh_key=ssh_key,
        interactive=sys.stdin.isatty() and sys.stdout.isatty() and not print_only,
        caller=(os.getuid(), os.getgid()), home=Path.home(),
    )
    from imagebuild.engine import connect, host_has_gpus

    client = connect("smoke")
    info = _image(client, ref, matrix, flavor, only, registry, echo)
    verified = _verify_first(client, info, verify_key, echo)
    from imagebuild.launch.driver import check_run

    check_run(info.labels, info.ref, ignore_driver, echo)  # the labels of the image ID about to start
    from imagebuild.host import host_root

    topo, mem = _host_facts(host_root(Path(os.environ.get(ROOT_ENV) or "/"), f"${ROOT_ENV}"))
    launch = make_launch(req, info, topo, engine_has_gpus=bool(topo.gpus) or host_has_gpus(client), mem_bytes=mem)
    for note in launch.notes:
        echo(note)
    if print_only:
        settings = launch.settings
        if verified is not None and settings.image == info.id:  # the digest verified, never a name resolved again
            settings = replace(settings, image=verified)
        elif info.ref != info.id and settings.image == info.id:  # print the name the user gave, not the ID
            settings = replace(settings, image=info.ref)
        click.echo(shell_join(settings.docker_run_args()))
        if launch.access is not None:
            for server in launch.access.servers():
                echo(f"then: {server.message}")
        return 0
    from imagebuild.launch import session

    if launch.access is not None:
        return session.run_server(client, launch.settings, launch.access, echo)
    return session.run_command(client, launch.settings, echo)
