"""`imagebuild render`: write one folder per image (Dockerfile + context files); `--check` detects drift."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from imagebuild.commands._options import (
    build_input_options,
    matrix_option,
    registry_option,
    resolve_matrix_path,
)
from imagebuild.errors import EXIT_FAILED
from imagebuild.files import check_output_dir

if TYPE_CHECKING:
    from imagebuild.inputs import BuildInputs


@click.command("render")
@matrix_option
@registry_option
@build_input_options
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default: rendered/<matrix name>).")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if the folder differs from a fresh render.")
def command(matrix: str, registry: str | None, inputs: BuildInputs, out: Path | None, check: bool) -> int:
    """Render Dockerfiles for every planned image into OUT/<image id>/.

    \b
    Example:
      imagebuild render --matrix images/cpu.yaml --out rendered/cpu
      imagebuild render --matrix images/cpu.yaml --out rendered/cpu --check   # CI: committed output is current
    """
    from imagebuild.plan import make_plan
    from imagebuild.plan.assemble import default_render_dir
    from imagebuild.plan.write import diff_rendered, write_rendered

    path = resolve_matrix_path(matrix)
    out = out or default_render_dir(path)
    plan = make_plan(path, inputs, registry, render_dir=out)
    if check:
        drift = diff_rendered(plan, out)
        if drift:
            for line in drift:
                click.echo(f"drift: {line}", err=True)
            click.echo(f"{out}: rendered output is out of date; run: imagebuild render --matrix {matrix} --out {out}",
                       err=True)
            return EXIT_FAILED
        click.echo(f"{out}: {len(plan.images)} images, up to date")
        return 0
    written = write_rendered(plan, check_output_dir(out, "--out"))
    click.echo(f"{out}: wrote {written} files for {len(plan.images)} images")
    return 0
