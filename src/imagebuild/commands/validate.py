"""`imagebuild validate --matrix FILE`: load, check and resolve a matrix; exit 0 with a one-line summary, or 2 with
every problem as `FILE:LINE: key.path: what is wrong; valid choices`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from imagebuild.commands._options import build_input_options, matrix_option
from imagebuild.inputs import BuildInputs
from imagebuild.matrix import find_matrix, load_matrix
from imagebuild.resolve import resolve_matrix

if TYPE_CHECKING:
    from imagebuild.models import ResolvedVariant


def summary(file: str, variants: list[ResolvedVariant]) -> str:
    images = sum(len(v.flavors) for v in variants)
    return f"{file}: valid — {len(variants)} variant{'s' * (len(variants) != 1)}, {images} image{'s' * (images != 1)}"


@click.command("validate")
@matrix_option
@build_input_options
@click.option("-v", "--verbose", is_flag=True, help="Also print each variant's pins and what resolution chose.")
def command(matrix: str, inputs: BuildInputs, verbose: bool) -> None:
    """Check a matrix file and resolve every pin, building nothing.

    \b
    Example:
      $ imagebuild validate --matrix h100.yaml
      images/h100.yaml: valid — 3 variants, 9 images
    """
    doc = load_matrix(find_matrix(matrix))
    variants = resolve_matrix(doc, inputs)
    if verbose:
        for v in variants:
            pins = ", ".join(f"{k} {val}" for k, val in v.versions.as_dict().items()
                             if val and k not in ("torch", "cuda", "python", "os"))
            click.echo(f"{v.key}: {pins}; flavors {', '.join(v.flavors)}; torch from {v.torch_index_url or 'PyPI'}")
            for what, why in v.chosen.items():
                click.echo(f"    {what}: {why}")
    click.echo(summary(doc.file, variants))
