"""`imagebuild refresh`: re-read torch wheel pins (cuDNN, NCCL, triton, Python range) from PyPI metadata and show
or write the difference to the packaged compat/data/torch.yaml. Downloads no wheel (pip --dry-run, PEP 658)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, cast

import click

from imagebuild.compat import refresh as rf
from imagebuild.compat.tables import data_path, load_from
from imagebuild.errors import ImagebuildError
from imagebuild.files import write_text_atomic

if TYPE_CHECKING:
    from imagebuild.compat.refresh import WheelPins


@click.command("refresh")
@click.option("--matrix", "-m", "matrix", default=None, metavar="FILE",
              help="Read the torch releases this matrix resolves to (instead of --torch / all of torch.yaml).")
@click.option("--torch", "torch_versions", multiple=True, metavar="X.Y.Z",
              help="Release to read (repeatable). Default: every release in torch.yaml.")
@click.option("--index-url", default=None, metavar="URL",
              help="Read a non-default variant, e.g. https://download.pytorch.org/whl/cu130 (default: PyPI).")
@click.option("--python", "python", default="3.12", show_default=True, help="Python the wheel is picked for.")
@click.option("--platform", default="manylinux_2_28_x86_64", show_default=True, help="Wheel platform tag.")
@click.option("--write", is_flag=True, help="Write the changes into torch.yaml (comments are kept).")
def command(matrix: str | None, torch_versions: tuple[str, ...], index_url: str | None, python: str, platform: str,
            write: bool) -> None:
    """Compare torch.yaml with the torch wheels' own metadata.

    \b
    Example:
      $ imagebuild refresh --torch 2.9.1 --torch 2.13.0      # or: imagebuild refresh -m images/h100.yaml
      2.13.0 cu130: confirmed (pins match the wheel)
      2 releases read, 1 change (run with --write to apply)
    """
    path = data_path("torch.yaml")
    tables = load_from(path.parent)
    versions = list(torch_versions)
    if matrix:
        from imagebuild.resolve import resolve_file

        _doc, variants = resolve_file(matrix)
        versions += sorted({v.versions.torch for v in variants} - set(versions))
    versions = versions or list(tables.torch)
    default = index_url is None

    def read(version: str) -> tuple[str, WheelPins | None, str | None]:
        try:
            return version, rf.parse_report(rf.pip_report(version, python=python, platform=platform,
                                                          index_url=index_url)), None
        except ImagebuildError as exc:
            return version, None, str(exc)

    with ThreadPoolExecutor(max_workers=4) as pool:  # each read is one small HTTP round-trip through pip
        results = list(pool.map(read, versions))
    text, changes, failed = path.read_text(encoding="utf-8"), 0, 0
    for version, pins, error in results:
        if error:
            click.echo(f"{version}: {error}", err=True)
            failed += 1
            continue
        lines = rf.diff(tables, cast("WheelPins", pins), default)  # no error: read() gave pins
        for line in lines:
            click.echo(line)
        if lines:
            changes += len(lines)
            text = rf.update_text(text, cast("WheelPins", pins), default)
    if write and changes:
        write_text_atomic(path, text)
    tail = "written to " + str(path) if write and changes else "run with --write to apply" if changes else "up to date"
    click.echo(f"{len(versions) - failed} release{'s' * (len(versions) - failed != 1)} read, "
               f"{changes} change{'s' * (changes != 1)} ({tail})")
    if failed:
        raise SystemExit(1)
