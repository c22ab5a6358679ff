"""`imagebuild export`: a built image as an enroot/pyxis `.sqsh` or a docker-archive for Apptainer; `--check` a .sqsh
(see imagebuild/export/)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from imagebuild.commands._options import platform_choice, verify_key_option
from imagebuild.errors import UsageError

if TYPE_CHECKING:
    from imagebuild.export import ExportResult
    from imagebuild.models import ImagePlan


def _from_matrix(client: Any, matrix: str, only: str | None, flavor: str | None, registry: str | None,
                 platform: str | None, echo: Callable[[str], None]) -> tuple[dict[str, Any], ImagePlan, Path]:
    """(inspect data, plan row, matrix path) of the record's image for the selected plan row."""
    from imagebuild.engine.rootfs import inspect_image
    from imagebuild.pipeline.loaded import load
    from imagebuild.pipeline.located import locate
    from imagebuild.pipeline.selection import pick_one

    planned = load(matrix, registry, None, None, echo)
    row = pick_one(planned.plan, only, flavor, str(planned.path), platform)
    here = locate(client, row, planned.record)
    image_id, why = here.image_id, here.why
    if image_id is None:
        raise UsageError(f"{planned.path}: {row.id} is not built here ({why}); build it with "
                         f"`imagebuild build --matrix {matrix} --only {row.id}`")
    info = inspect_image(client, image_id)
    if info is None:
        raise UsageError(f"{row.id}: image {image_id[:19]} is gone from the engine (run imagebuild build)")
    echo(f"image: {row.tag} ({image_id[:19]})")
    return info, row, planned.path


def _remember(matrix_path: Path, row: ImagePlan, result: ExportResult) -> None:
    """The record's entry for this plan row learns the export (only when it still holds the exported image)."""
    from imagebuild.record import updating

    with updating(matrix_path) as rec:
        entry = rec.image(row.id)
        if entry is not None and entry.image_id == result.image_id:
            entry.exports[result.format] = {**result.as_record(), "at": _now()}


def _now() -> str:
    from imagebuild.record import now

    return now()


def _verify_key(flag: str | None) -> Any:
    from imagebuild.sign import configured_public_key

    return configured_public_key(flag)


def _check(path: Path) -> int:
    from imagebuild.export.squashfs import sidecar, verify
    from imagebuild.files import sha256_file

    verdict = verify(path, sha256_of=sha256_file)
    if verdict.problems:
        for p in verdict.problems:
            click.echo(f"error: {p}", err=True)
        return 1
    sha = f"sha256 matches {sidecar(path).name}" if verdict.sha256_verified else \
        f"sha256 not verified: no {sidecar(path).name} beside it"
    click.echo(f"{path}: squashfs whole (superblock, size, every block decompressed; {sha}); compressed with "
               f"{verdict.compressor}: the nodes' kernel needs {verdict.kernel_option}"
               + (" (every distribution kernel has it)" if verdict.compressor == "gzip" else ""))
    return 0


_NAMES_OF = {"squashfs": (".sqsh", ".squashfs", ".sqfs"), "docker-archive": (".tar", ".tar.gz", ".tgz")}


def _check_name(output: Path, fmt: str) -> None:
    """A file named for the other format would be taken for it (pyxis mounts a .sqsh; apptainer reads a .tar)."""
    for other, suffixes in _NAMES_OF.items():
        if other != fmt and output.name.lower().endswith(suffixes):
            want = _NAMES_OF[fmt][0]
            raise UsageError(f"-o {output}: a {other} name for a {fmt} export; name it *{want} (or give --format "
                             f"{other})")


@click.command("export")
@click.argument("image", required=False, metavar="[IMAGE]")
@click.option("-o", "--output", type=click.Path(path_type=Path), metavar="FILE",
              help="where the export goes (.sqsh for squashfs, .tar for docker-archive)")
@click.option("--format", "fmt", type=click.Choice(["squashfs", "docker-archive"]), default="squashfs",
              show_default=True, help="squashfs: enroot/pyxis .sqsh; docker-archive: `docker save` tar for Apptainer")
@click.option("--compression", type=click.Choice(["gzip", "none"]), default="gzip", show_default=True,
              help="squashfs compression: gzip mounts on every kernel; none as pyxis' example config")
@click.option("--matrix", "-m", metavar="FILE", help="export this matrix's built image (with --only / --flavor)")
@click.option("--only", help="with --matrix: the plan id / tag / glob of one image")
@click.option("--flavor", type=click.Choice(["base", "runtime", "dev"]), help="with --matrix: narrow by flavor")
@click.option("--registry", default=None, help="with --matrix: registry prefix the plan's tags carry")
@click.option("--platform", default=None, metavar="OS/ARCH",
              help="the platform the nodes run (linux/arm64 for GH200): with --matrix, the row of that platform; "
                   "with IMAGE, refuse an image of another platform")
@click.option("--force", is_flag=True, help="replace an existing output file")
@click.option("--tmp-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="where the image's files are unpacked for packing (default: $TMPDIR)")
@click.option("--check", "check_file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE.sqsh",
              help="check a .sqsh for damage or truncation instead of exporting")
@verify_key_option
def command(image: str | None, output: Path | None, fmt: str, compression: str, matrix: str | None, only: str | None,
            flavor: str | None, registry: str | None, platform: str | None, force: bool, tmp_dir: Path | None,
            check_file: Path | None, verify_key: str | None) -> int:
    """Export a built IMAGE (tag or ID) or a matrix's image (--matrix M --only SEL) for Slurm clusters: an enroot
    `.sqsh` for `srun --container-image=FILE.sqsh` (pyxis), or a docker-archive for
    `apptainer build x.sif docker-archive:FILE.tar`. The image never runs; the same image gives the same .sqsh.

    \b
    Examples:
      imagebuild export pytorch-cpu:2.13.0-cpu-py3.11-debian12-runtime -o /shared/images/pytorch-cpu.sqsh
      imagebuild export -m images/h100.yaml --only '*runtime' -o /lustre/images/pytorch-h100.sqsh
      imagebuild export -m images/cpu.yaml --only '*runtime' --format docker-archive -o pytorch-cpu.tar
      imagebuild export -m images/gh200.yaml --only '*runtime' --platform linux/arm64 -o /lustre/images/gh200.sqsh
      imagebuild export --check /shared/images/pytorch-cpu.sqsh

    With --verify-key (or IMAGEBUILD_VERIFY_KEY) only an image whose registry digest is signed with that key (and
    carries its SBOM and provenance attestations) is exported, and only when the engine's image is that digest's.
    """
    from imagebuild import export as ex

    def echo(msg: str) -> None:
        click.echo(msg, err=True)

    if check_file is not None:
        ctx = click.get_current_context()
        given = [f"--{name.replace('_', '-')}" for name in ("fmt", "compression", "only", "flavor", "registry",
                                                            "platform", "force", "tmp_dir")
                 if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)]
        given = ["--format" if g == "--fmt" else g for g in given]
        if image or output or matrix or given:
            raise UsageError("--check FILE takes no IMAGE, --output, --matrix or "
                             + (", ".join(given) if given else "other option") + " (it only checks the file)")
        return _check(check_file)
    if output is None:
        raise UsageError("give --output FILE (e.g. -o image.sqsh)")
    if matrix and image:
        raise UsageError("give an IMAGE or --matrix with --only, not both")
    if not matrix and (only or flavor or registry is not None):
        raise UsageError("--only, --flavor and --registry go with --matrix")
    if not matrix and not image:
        raise UsageError("give an IMAGE (tag or ID) or --matrix FILE --only SEL")
    if fmt == "docker-archive" and click.get_current_context().get_parameter_source("compression") not in (
            None, click.core.ParameterSource.DEFAULT):
        raise UsageError("--compression is for --format squashfs")
    _check_name(output, fmt)
    platform = platform_choice(platform)
    ex.writer.check_destination(output, force)  # before the engine is asked anything
    _verify_key(verify_key)  # a bad key file: said before the engine is asked anything
    if matrix:  # the record learns the export at the end: a state folder it cannot write is said now, not then
        from imagebuild.files import check_output_dir
        from imagebuild.record.store import state_dir

        check_output_dir(state_dir(), "state folder (IMAGEBUILD_STATE_DIR)")

    from imagebuild.engine import connect, rootfs

    client = connect("build")  # long silent stream reads: the build purpose's read timeout
    info: dict[str, Any] | None  # the image's inspect data
    row = matrix_path = None
    if matrix:
        info, row, matrix_path = _from_matrix(client, matrix, only, flavor, registry, platform, echo)
        name = row.tag
    else:
        info = rootfs.inspect_image(client, cast(str, image))  # no --matrix: IMAGE was given (checked above)
        if info is None:
            raise UsageError(f"image {image!r} is not in the engine: build it (imagebuild build) or pull it")
        name = cast(str, image)
    image_platform = f"{info.get('Os') or 'linux'}/{info.get('Architecture') or '?'}"
    if platform is not None and image_platform != platform:
        from imagebuild.pasteable import shell_join

        pull = shell_join(["docker", "pull", "--platform", platform, name])
        raise UsageError(f"{name}: the engine's image is {image_platform}, not {platform}: pull that platform's "
                         f"image ({pull}) or export it from its matrix row (--matrix M --platform ...)")
    public = _verify_key(verify_key)
    if public is not None:
        from imagebuild.sign.verify import check_image

        verified = check_image(name, public, inspect=info)
        echo(f"verified: {verified.digest_ref} (signature + SBOM + provenance, key {public.describe()})")
    progress = ex.Progress(sys.stderr.isatty())
    from imagebuild.engine.containers import signals_raise

    with signals_raise():  # SIGTERM/SIGHUP like Ctrl-C: the scratch tree, the .partial file and the container go
        if fmt == "squashfs":
            result = ex.export_squashfs(lambda: rootfs.container_filesystem(client, str(info["Id"])), info, output,
                                        compression=compression, force=force, work_dir=tmp_dir, progress=progress)
        else:
            # saved by the ID inspected (and verified), never by a name the engine resolves again; the name is
            # written into the archive, which is checked to be that ID's image before it is renamed into place
            result = ex.export_archive(rootfs.saved_image(client, str(info["Id"])), info, output, name=name,
                                       force=force, progress=progress)
    if row is not None and matrix_path is not None:
        _remember(matrix_path, row, result)
    from imagebuild.units import format_size

    ratio = f", {result.size / result.image_size:.0%} of the image's {format_size(result.image_size)}" \
        if result.image_size else ""
    click.echo(f"wrote {result.path} ({image_platform}, {format_size(result.size)}{ratio}) in "
               f"{result.seconds:.1f} s; {result.sha256}")
    from imagebuild.oci.pyxis import container_image_flag
    from imagebuild.pasteable import file_argument, shell_join

    written = file_argument(str(result.path), "--output")  # absolute: pyxis reads a relative name as a Hub image
    if fmt == "squashfs":
        echo(f"pyxis: srun {shell_join([container_image_flag(written)])} ...   "
             f"(enroot: {shell_join(['enroot', 'create', written])})")
    else:
        echo(f"apptainer: {shell_join(['apptainer', 'build', 'image.sif', 'docker-archive:' + written])}")
    return 0
