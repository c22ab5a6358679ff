"""`imagebuild report`: re-render build-report.md (and the JUnit XML) from build-report.json and print it."""

from __future__ import annotations

import json

import click


@click.command("report")
@click.option("--report-dir", default="reports", show_default=True, metavar="DIR",
              help="Folder holding build-report.json (written by build, test and push).")
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True,
              help="What to print: the Markdown table (fit for $GITHUB_STEP_SUMMARY) or the JSON document.")
def command(report_dir, fmt):
    """Print the report of the last build/test/push runs; also rewrites build-report.md and the JUnit XML.

    \b
    Example:
      imagebuild report --report-dir reports >> "$GITHUB_STEP_SUMMARY"
      imagebuild report --report-dir reports --format json | jq '.images[].push.digest'
    """
    from pathlib import Path

    from imagebuild.errors import UsageError
    from imagebuild.report import JSON_NAME, load_report, render_markdown, rerender

    if not (Path(report_dir) / JSON_NAME).is_file():
        raise UsageError(f"{Path(report_dir) / JSON_NAME}: no report yet (run imagebuild build/test/push first)")
    doc = load_report(report_dir)
    rerender(report_dir)
    if fmt == "json":
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(render_markdown(doc), nl=False)
    return 0
