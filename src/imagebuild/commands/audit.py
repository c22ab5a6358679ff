"""`imagebuild audit`: installed packages of local images against their release's signed security suite and an OSV
database, judged by the matrix's `audit:` policy."""

from __future__ import annotations

import json
from typing import Any

import click

from imagebuild.commands._options import state_dir_option
from imagebuild.errors import UsageError


def _say(message: str) -> None:
    click.echo(message, err=True)


@click.command("audit")
@click.option("--image", "images", multiple=True, metavar="REF",
              help="A local image (tag or ID) to audit; repeat for each.")
@click.option("-m", "--matrix", default=None, metavar="FILE",
              help="Audit every planned image of this matrix the engine holds, under the matrix's `audit:` policy "
                   "(with --image: the policy only).")
@click.option("--osv", default=None, metavar="PATH",
              help="OSV database for the Python packages: a folder of OSV JSON or the PyPI export all.zip "
                   "(default: $IMAGEBUILD_OSV_DB; none: Python is 'not checked').")
@click.option("--pypi", is_flag=True,
              help="Also ask PyPI's project JSON (network, $PIP_CERT trusted): its advisories cover only the newest "
                   "release, so an older installed version is listed as not checked via PyPI.")
@click.option("--no-changelogs", is_flag=True,
              help="Do not read the fixed packages' changelogs for CVE IDs (findings then say the IDs were not read).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@state_dir_option
def command(images: tuple[str, ...], matrix: str | None, osv: str | None, pypi: bool, no_changelogs: bool,
            as_json: bool, state_dir: str | None) -> int:
    """Compare each image's dpkg packages with the security suite of its release (Debian
    <codename>-security, Ubuntu <codename>-security main + universe; InRelease verified with the archive keys
    compat/data/os.yaml pins, Packages checked against its sha256; read once per run, kept by hash in
    $IMAGEBUILD_CACHE_DIR/security-index) and its Python distributions with an OSV database. Each finding names the
    package, installed and fixed version, the IDs the fix names where they could be read, its source and date. A
    source that could not be consulted is "NOT CHECKED" with why, never clean. The inventory is the one kept per
    image ID beside the record (read from the image only the first time).

    \b
    Exit codes: 0 every source checked, nothing violates the policy (or an allowance covers it); 1 a violation
    (default policy: any security fix; matrix `audit: {fail_on, python_severity, allow}`); 2 bad input (an
    allowance without a reason or past its expiry date); 3 nothing violates but some source was not checked.

    \b
    Examples:
      imagebuild audit --image pytorch:2.13.0-cpu-py3.11-debian12-runtime
      imagebuild audit -m images/cpu.yaml --osv ~/osv/PyPI/all.zip --json
    """
    if not images and not matrix:
        raise UsageError("give --image REF (repeatable) or -m/--matrix FILE")
    from imagebuild.pipeline.auditing import audit_images

    results = audit_images(list(images), matrix, state_dir, osv, not no_changelogs, _say, pypi=pypi)
    if as_json:
        doc: dict[str, Any] = {"images": results.json, "exit_code": results.exit_code}
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        click.echo(results.text, nl=False)
    return results.exit_code
