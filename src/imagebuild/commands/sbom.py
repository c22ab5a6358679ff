"""`imagebuild sbom REF`: a CycloneDX JSON SBOM of any image, from what is really inside it."""

from __future__ import annotations

import click

from imagebuild.errors import ImagebuildError, UsageError
from imagebuild.files import check_output_file, write_text_atomic


@click.command("sbom")
@click.argument("reference", metavar="REF")
@click.option("-o", "--output", "output", default=None, metavar="FILE",
              help="Write the SBOM here (default: standard output).")
@click.option("--platform", default=None, metavar="OS/ARCH",
              help="For a registry index: which image to read (default: this host's, e.g. linux/amd64).")
@click.option("--ca-file", default=None, type=click.Path(dir_okay=False, exists=True),
              help="CA certificate of a TLS registry (default: /etc/docker/certs.d/<registry>/ca.crt).")
def command(reference: str, output: str | None, platform: str | None, ca_file: str | None) -> int:
    """Write a CycloneDX 1.6 SBOM of image REF: every dpkg package (status and status.d), every installed Python
    distribution (any site-packages / dist-packages) with version, license and purl, the image's labels, ID and
    digests. Files are read from a created, never started container (or, for a registry reference that is not
    local, from the layer blobs): nothing of the image runs, so any image works, with or without python or dpkg. An
    image ID read before (a build's SBOM) is not read again: its files are kept with the state (IMAGEBUILD_STATE_DIR,
    else .imagebuild/, when that folder exists), each copy checked against its hash.

    \b
    REF: a local tag or image ID; HOST[:PORT]/REPO:TAG (or @sha256:...) not in the engine is read from that
    registry; docker://REF always reads from the registry. Same image, same bytes: components are sorted, the
    serial number derives from the image ID, the timestamp is SOURCE_DATE_EPOCH or the image's created time.

    \b
    Example:
      imagebuild sbom pytorch:2.13.0-cpu-py3.11-debian12-runtime -o runtime.cdx.json
    """
    if not reference.strip():
        raise UsageError("REF is empty: give a local tag or image ID, or HOST[:PORT]/REPO:TAG")
    from imagebuild.engine import connect
    from imagebuild.inventory import dump_sbom, make_sbom
    from imagebuild.inventory.open import Opener
    from imagebuild.pipeline.keptfiles import kept_files_of

    path = check_output_file(output, "-o") if output and output != "-" else None  # before the image is read

    def say(message: str) -> None:
        click.echo(message, err=True)

    opener = Opener(lambda: connect("inspect"), platform=platform, ca_file=ca_file,
                    log=say, files_of=kept_files_of(say))
    text = dump_sbom(make_sbom(opener.open(reference)))
    if path is not None:
        try:  # never a half-written SBOM under the final name, never through a link planted beside it
            write_text_atomic(path, text)
        except OSError as exc:
            raise ImagebuildError(f"{output}: cannot write the SBOM: {exc.strerror or exc}") from None
        click.echo(f"wrote {path}", err=True)
    else:
        click.echo(text, nl=False)
    return 0
