"""`imagebuild slurm`: print the srun line and sbatch script that start an image through pyxis on a Slurm cluster
(see launch/slurm.py). Text only: nothing is submitted, no engine is needed for a reference or a .sqsh."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from imagebuild.commands._options import platform_choice, verify_key_option
from imagebuild.errors import UsageError

ROOT_ENV = "IMAGEBUILD_HOST_ROOT"  # the same override `imagebuild run` reads


@dataclass(frozen=True)
class _Chosen:
    """What --matrix picked: the image for pyxis, and what the record ties it to (for --verify-key)."""

    image: str  # the plan row's tag, or the record's .sqsh export of its image
    tag: str | None = None
    exported_id: str | None = None  # the image ID the .sqsh was exported from
    exported_sha256: str | None = None  # the sha256 export wrote for it (sha256:HEX)
    push: dict[str, Any] = field(default_factory=dict)  # the record's push of the row to its repository


def _matrix_image(matrix: str, only: str | None, flavor: str | None, registry: str | None, platform: str | None,
                  echo: Callable[[str], None]) -> _Chosen:
    """The plan row's tag, or the .sqsh the record says was exported for the very image of these inputs."""
    from imagebuild.pipeline.loaded import load
    from imagebuild.pipeline.located import recorded_state
    from imagebuild.pipeline.selection import pick_one

    planned = load(matrix, registry, None, None, echo)
    row = pick_one(planned.plan, only, flavor, str(planned.path), platform)
    image_id = recorded_state(planned.record, row).image_id
    entry = planned.record.image(row.id) if planned.record is not None else None
    export = (entry.exports.get("squashfs") if entry is not None else None) or {}
    push = (entry.pushes.get(row.repository) if entry is not None else None) or {}
    if image_id and export.get("image_id") == image_id and Path(str(export.get("path"))).is_file():
        echo(f"image: {export['path']} (the record's export of {row.tag})")
        return _Chosen(str(export["path"]), row.tag, image_id, str(export.get("sha256") or "") or None, push)
    return _Chosen(row.tag, row.tag)


def _file_is_the_export(image: str, chosen: _Chosen) -> None:
    """The .sqsh about to be named is, byte for byte, the file export wrote: whole (`export --check`'s check,
    its sidecar included) and of the sha256 the record holds (a file replaced after the export, its sidecar with it,
    is refused). VerifyError naming the file otherwise."""
    from imagebuild.export.squashfs import verify
    from imagebuild.files import sha256_file
    from imagebuild.sign.verify import VerifyError

    path = Path(image)
    hashed: dict[Path, str] = {}

    def sha256_of(p: Path) -> str:
        if p not in hashed:
            hashed[p] = sha256_file(p)
        return hashed[p]

    verdict = verify(path, sha256_of=sha256_of)
    if verdict.problems:
        raise VerifyError(f"not verified: {verdict.problems[0]}")
    want = chosen.exported_sha256 or ""
    got = f"sha256:{sha256_of(path)}"
    if got != want:
        raise VerifyError(f"{image}: sha256 {got} is not the {want or 'sha256 (none recorded)'} the record holds "
                          f"for its export of {str(chosen.exported_id)[:19]}: the file changed since the export; "
                          "export it again (imagebuild export --matrix ... --force)")


def _verified(image: str, chosen: _Chosen | None, verify_key: str | None, echo: Callable[[str], None]) -> str:
    """With a verify key configured: the image pyxis starts is the signed digest. A reference is verified and
    pinned to that digest (the nodes pull exactly what was verified, even if the tag moves later); a .sqsh passes
    only when the record ties it to the signed digest its tag names (an export of the image pushed as it)."""
    from imagebuild.oci.pyxis import is_file_image
    from imagebuild.sign import configured_public_key

    public = configured_public_key(verify_key)
    if public is None:
        return image
    from imagebuild.sign.verify import VerifyError, check_image

    from_record = chosen is not None and chosen.exported_id is not None and image == chosen.image
    if not (from_record if chosen is not None else is_file_image(image)):
        verified = check_image(image, public)
        echo(f"verified: {verified.digest_ref} (signature + SBOM + provenance, key {public.describe()}); "
             "pyxis pulls that digest")
        return verified.digest_ref
    if chosen is None or chosen.tag is None:
        raise VerifyError(f"{os.path.abspath(image)}: a .sqsh file carries no signature; with a verify key give the "
                          "image reference or --matrix (whose record ties its export to the signed digest)")
    _file_is_the_export(image, chosen)
    verified = check_image(chosen.tag, public)
    if chosen.push.get("digest") != verified.digest or chosen.push.get("image_id") != chosen.exported_id:
        raise VerifyError(f"{image}: exported from {str(chosen.exported_id)[:19]}, which the record does not show "
                          f"pushed as the signed {verified.digest} that {chosen.tag} names now")
    echo(f"verified: {image} is the export of {verified.digest_ref} (signature + SBOM + provenance)")
    return image


@click.command("slurm")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--matrix", "-m", metavar="FILE", help="the matrix's image (with --only/--flavor) instead of IMAGE")
@click.option("--only", help="with --matrix: the plan id / tag / glob of one image")
@click.option("--flavor", type=click.Choice(["base", "runtime", "dev"]), help="with --matrix: narrow by flavor")
@click.option("--registry", default=None, help="with --matrix: registry prefix the plan's tags carry")
@click.option("--platform", default=None, metavar="OS/ARCH",
              help="with --matrix: the row of the platform the nodes run (linux/arm64 for GH200)")
@click.option("--nodes", "-N", type=int, default=1, show_default=True, help="nodes of the job")
@click.option("--gpus-per-node", type=int, default=None, help="default: every GPU of the node model")
@click.option("--mount", "mounts", multiple=True, metavar="SRC:DST[:FLAGS]", help="pyxis --container-mounts entry")
@click.option("--workspace", default=None, metavar="DIR",
              help="host folder mounted at --workdir (default: the current one)")
@click.option("--no-workspace", is_flag=True, help="mount nothing at --workdir")
@click.option("--workdir", default="/workspace", show_default=True, help="--container-workdir")
@click.option("--job-name", default="pytorch", show_default=True)
@click.option("--partition", "-p", default=None)
@click.option("--time", "-t", "time_limit", default=None, metavar="HH:MM:SS")
@click.option("--host-root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="read the node model (GPUs, NUMA, /sys/class/infiniband) under this tree, e.g. one recorded on a "
                   "compute node (default: $IMAGEBUILD_HOST_ROOT or this host)")
@click.option("--sbatch/--srun", "as_sbatch", default=True, help="print the sbatch script (default) or the srun line")
@click.option("--ignore-driver", is_flag=True, help="print the job even when the node's NVIDIA driver is older than "
              "the image's io.imagebuild.min-driver label")
@verify_key_option
def command(args: Sequence[str], matrix: str | None, only: str | None, flavor: str | None, registry: str | None,
            platform: str | None, nodes: int, gpus_per_node: int | None, mounts: tuple[str, ...], workspace: str | None,
            no_workspace: bool, workdir: str, job_name: str, partition: str | None, time_limit: str | None,
            host_root: Path | None, as_sbatch: bool, verify_key: str | None, ignore_driver: bool = False) -> int:
    """Print how to start IMAGE (a .sqsh from `imagebuild export`, or a tag) on Slurm with pyxis: one task per GPU,
    CPU/memory bound to each GPU's NUMA node, NCCL on the InfiniBand ports found, the workspace mounted. A path, a
    name ending .sqsh/.sqfs/.squashfs or a file here is a local squashfs (written absolute), never a registry image.

    \b
    Examples:
      imagebuild slurm /lustre/images/pytorch-h100.sqsh --nodes 4 -- python train.py --config c.yaml
      imagebuild slurm -m images/h100.yaml --only '*runtime' --srun -- python -c 'import torch'
      imagebuild slurm registry.example:5000/ml/pytorch:2.13-cu128-runtime --host-root /shared/node-model

    With --verify-key (or IMAGEBUILD_VERIFY_KEY) the image must be signed with that key and carry its SBOM and
    provenance attestations; the script then names the verified digest (REPO@sha256:...), not the tag.
    """
    from imagebuild.host import host_root as check_root
    from imagebuild.host import nvidia_smi_outputs, read_fabric, read_topology
    from imagebuild.launch.slurm import SlurmRequest, make_slurm

    def echo(msg: str) -> None:
        click.echo(msg, err=True)

    args = list(args)
    chosen = None
    if matrix:
        chosen = _matrix_image(matrix, only, flavor, registry, platform_choice(platform), echo)
        image = chosen.image
    else:
        if only or flavor or registry is not None or platform is not None:
            raise UsageError("--only, --flavor, --platform and --registry go with --matrix")
        if not args or args[0] == "--":
            raise UsageError("give an IMAGE (.sqsh path or reference) or --matrix FILE --only SEL")
        image = args.pop(0)
        if image.startswith("-"):
            raise UsageError(f"no such option: {image} (options go before the image)")
    if args and args[0] == "--":
        args.pop(0)
    if no_workspace and workspace:
        raise UsageError("--workspace and --no-workspace: pick one")
    if host_root is not None:  # bad input is said before anything is asked of a registry or cosign
        root = check_root(host_root, "--host-root")
    else:
        root = check_root(Path(os.environ.get(ROOT_ENV) or "/"), f"${ROOT_ENV}")
    image = _verified(image, chosen, verify_key, echo)
    from imagebuild.launch.driver import check_slurm

    check_slurm(image, chosen.exported_id if chosen else None, root, ignore_driver, echo)
    topo = read_topology(root, **nvidia_smi_outputs(root))
    from imagebuild.oci import ReferenceSyntaxError

    req = SlurmRequest(image=image, command=tuple(args), nodes=nodes, gpus_per_node=gpus_per_node,
                       mounts=tuple(mounts), workspace=None if no_workspace else (workspace or os.getcwd()),
                       workdir=workdir, job_name=job_name, partition=partition, time=time_limit)
    try:
        lines = make_slurm(req, topo, read_fabric(root))
    except ReferenceSyntaxError as exc:
        raise UsageError(f"{image}: not a .sqsh path or an image reference ({exc})") from None
    for note in lines.notes:
        echo(note)
    if as_sbatch:
        click.echo(lines.sbatch_text(), nl=False)
    else:
        if nodes > 1:
            echo("note: more than one node: run the srun line inside an allocation that sets MASTER_ADDR "
                 "(the sbatch script does)")
        click.echo(lines.srun_text(standalone=nodes == 1))
    return 0
