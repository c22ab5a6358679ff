"""`imagebuild audit`: installed packages of local images (or of a pushed digest, by its attested SBOM) against their release's signed security suite and an OSV
database, judged by the matrix's `audit:` policy."""

from __future__ import annotations

import json
from typing import Any

import click

from imagebuild.commands._options import state_dir_option
from imagebuild.errors import UsageError


def _say(message: str) -> None:
    click.echo(message, err=True)


def _remote(ref: str) -> bool:
    """May `ref` be read from a registry (docker://, or a reference naming its registry)?"""
    from imagebuild.oci import Reference, ReferenceSyntaxError

    if ref.startswith("docker://"):
        return True
    try:
        return Reference.parse(ref).domain is not None
    except ReferenceSyntaxError:
        return False


@click.command("audit")
@click.option("--image", "images", multiple=True, metavar="REF",
              help="An image to audit; repeat for each. A local tag or ID; docker://REGISTRY/REPO:TAG (or a "
                   "HOST[:PORT]/REPO:TAG the engine does not hold): the pushed digest, by the SBOM a signed push "
                   "attested for it (nothing pulled).")
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
@click.option("--verify-key", default=None, metavar="FILE|KMS-URI",
              help="For a registry image: first verify its signature and SBOM attestation with this cosign public "
                   "key (default: $IMAGEBUILD_VERIFY_KEY; none: the SBOM is read unverified and said so).")
@click.option("--platform", default=None, metavar="OS/ARCH",
              help="For a registry index: which platform image to audit (default: this host's, e.g. linux/amd64).")
@click.option("--ca-file", default=None, type=click.Path(dir_okay=False, exists=True),
              help="CA certificate of a TLS registry (default: /etc/docker/certs.d/<registry>/ca.crt).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@state_dir_option
def command(images: tuple[str, ...], matrix: str | None, osv: str | None, pypi: bool, no_changelogs: bool,
            verify_key: str | None, platform: str | None, ca_file: str | None, as_json: bool,
            state_dir: str | None) -> int:
    """Compare each image's dpkg packages with the security suite of its release (Debian
    <codename>-security, Ubuntu <codename>-security main + universe; InRelease verified with the archive keys
    compat/data/os.yaml pins, Packages checked against its sha256; read once per run, kept by hash in
    $IMAGEBUILD_CACHE_DIR/security-index) and its Python distributions with an OSV database. Each finding names the
    package, installed and fixed version, the IDs the fix names where they could be read, its source and date. A
    source that could not be consulted is "NOT CHECKED" with why, never clean. The inventory is the one kept per
    image ID beside the record (read from the image only the first time).

    \b
    A pushed image (--image docker://REGISTRY/REPO:TAG): the tag is resolved to a digest once (an index: the
    --platform image) and the CycloneDX SBOM attested for exactly that digest is audited (no image pulled; the
    result names the digest; an attestation made for another digest is refused). With --verify-key its signature
    and attestations are verified first; without, the "sbom" source says NOT VERIFIED (exit 3 at best). No SBOM
    attached (a push without --sign-key) or a damaged one: an error naming the digest.

    \b
    Exit codes: 0 every source checked, nothing violates the policy (or an allowance covers it); 1 a violation
    (default policy: any security fix; matrix `audit: {fail_on, python_severity, allow}`); 2 bad input (an
    allowance without a reason or past its expiry date); 3 nothing violates but some source was not checked.

    \b
    Examples:
      imagebuild audit --image pytorch:2.13.0-cpu-py3.11-debian12-runtime
      imagebuild audit -m images/cpu.yaml --osv ~/osv/PyPI/all.zip --json
      imagebuild audit --image docker://127.0.0.1:5000/ml/pytorch:2.13.0-cpu-py3.11-debian12-runtime --verify-key cosign.pub
    """
    if not images and not matrix:
        raise UsageError("give --image REF (repeatable) or -m/--matrix FILE")
    from imagebuild.pipeline.auditing import audit_images
    from imagebuild.sign import configured_public_key

    remote = any(_remote(i) for i in images)
    if verify_key is not None and not remote:  # a key that checks nothing must not read as "verified"
        raise UsageError("--verify-key checks a pushed image's signature and SBOM: give --image "
                         "docker://REGISTRY/REPO:TAG (a local image or a matrix is audited from its own files)")
    key = configured_public_key(verify_key) if remote else None
    results = audit_images(list(images), matrix, state_dir, osv, not no_changelogs, _say, pypi=pypi,
                           verify_key=key, ca_file=ca_file, platform=platform)
    if as_json:
        doc: dict[str, Any] = {"images": results.json, "exit_code": results.exit_code}
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        click.echo(results.text, nl=False)
    return results.exit_code
