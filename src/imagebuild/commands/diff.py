"""`imagebuild diff A B`: what changed from image A to image B (packages, version labels, layers)."""

from __future__ import annotations

import json

import click


@click.command("diff")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option("--platform", default=None, metavar="OS/ARCH",
              help="For a registry index: which image to read (default: this host's, e.g. linux/amd64).")
@click.option("--ca-file", default=None, type=click.Path(dir_okay=False, exists=True),
              help="CA certificate of a TLS registry (default: /etc/docker/certs.d/<registry>/ca.crt).")
def command(a: str, b: str, as_json: bool, platform: str | None, ca_file: str | None) -> int:
    """Compare image A with image B: OS (dpkg) and Python packages added, removed and changed (old → new), the
    version labels (io.imagebuild.*, org.opencontainers.*) that differ, and the layers with their sizes (which are
    shared, totals).

    \b
    A and B: local tags or image IDs; HOST[:PORT]/REPO:TAG (or @sha256:...) not in the engine is read from that
    registry by streaming its layer blobs (nothing is pulled into the engine; a line on stderr says so);
    docker://REF always reads from the registry. Registry layer sizes are compressed, local ones uncompressed. A
    local image ID read before (a build's SBOM) is not read again: its files are kept with the state
    (IMAGEBUILD_STATE_DIR, else .imagebuild/, when that folder exists), each copy checked against its hash.

    \b
    Example:
      imagebuild diff pytorch:2.13.0-cpu-py3.11-debian12-runtime pytorch:2.13.0-cpu-py3.11-debian12-dev
      imagebuild diff --json 127.0.0.1:5000/ml/pytorch:old local-image:new
    """
    from imagebuild.engine import connect
    from imagebuild.inventory import diff, diff_to_json, format_diff
    from imagebuild.inventory.open import Opener
    from imagebuild.pipeline.keptfiles import kept_files_of

    def say(message: str) -> None:
        click.echo(message, err=True)

    opener = Opener(lambda: connect("inspect"), platform=platform, ca_file=ca_file,
                    log=say, files_of=kept_files_of(say))
    result = diff(opener.open(a), opener.open(b))
    if as_json:
        click.echo(json.dumps(diff_to_json(result), indent=2, ensure_ascii=False))
    else:
        click.echo(format_diff(result), nl=False)
    return 0
