"""`imagebuild report`: print the report of a matrix's last run (re-rendering its Markdown and JUnit files)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from imagebuild.errors import UsageError
from imagebuild.pipeline.settings import default_report_dir, resolve_matrix_path


@click.command("report")
@click.option("--matrix", "-m", "matrix", default=None, metavar="FILE",
              help="The matrix whose last run to show (its report folder: reports/<matrix>/).")
@click.option("--report-dir", default=None, metavar="DIR",
              help="Folder holding build-report.json (default: reports/<matrix>/ with -m).")
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True,
              help="What to print: the Markdown table (fit for $GITHUB_STEP_SUMMARY) or the JSON document.")
def command(matrix: str | None, report_dir: str | Path | None, fmt: str) -> int:
    """Print the report of the last build/test/push run of a matrix; also rewrites build-report.md and the JUnit XML.

    \b
    Example:
      imagebuild report -m images/cpu.yaml >> "$GITHUB_STEP_SUMMARY"
      imagebuild report --report-dir reports/cpu --format json | jq '.images[].push.digest'
    """
    from imagebuild.report import JSON_NAME, load_report, render_markdown, rerender

    if report_dir is None:
        if matrix is None:
            raise UsageError("give -m MATRIX (its report folder reports/<matrix>/) or --report-dir DIR")
        report_dir = default_report_dir(resolve_matrix_path(matrix))
    if not (Path(report_dir) / JSON_NAME).is_file():
        raise UsageError(f"{Path(report_dir) / JSON_NAME}: no report yet (run imagebuild build/test/push first)")
    doc = load_report(report_dir)
    try:
        rerender(report_dir)
    except OSError as exc:  # a read-only folder (a downloaded artifact): still print the report
        click.echo(f"warning: {report_dir}: cannot rewrite the Markdown and JUnit files ({exc.strerror})", err=True)
    if fmt == "json":
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(render_markdown(doc), nl=False)
    return 0
