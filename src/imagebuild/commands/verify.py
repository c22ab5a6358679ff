"""`imagebuild verify REF`: is the image REF names now signed with this key, with its SBOM and provenance attested
for exactly that digest? (see imagebuild/sign/verify.py)"""

from __future__ import annotations

import json
from typing import Any

import click

from imagebuild.commands._options import no_empty_key
from imagebuild.errors import EXIT_OK, UsageError


@click.command("verify")
@click.argument("reference", metavar="REF")
@click.option("--key", "key", default=None, metavar="FILE|KMS-URI",
              callback=no_empty_key("IMAGEBUILD_VERIFY_KEY", "the cosign public key (cosign.pub)"),
              help="The cosign public key (cosign.pub) or KMS URI the image must be signed with "
                   "(default: $IMAGEBUILD_VERIFY_KEY).")
@click.option("--ca-file", default=None, type=click.Path(dir_okay=False, exists=True),
              help="CA certificate of a TLS registry (default: /etc/docker/certs.d/<registry>/ca.crt).")
@click.option("--max-audit-age", default=None, metavar="DURATION",
              help="Also require an audit attestation (cosign --type vuln: a CycloneDX vulnerabilities document of "
                   "`imagebuild audit`, attached by a signed push) signed by --key for the digest, audited no longer "
                   "ago than DURATION (e.g. 7d, 12h; units s, m, h, d, w); for an index, of each platform image.")
@click.option("--json", "as_json", is_flag=True, help="Print the digest and the attested statements as JSON.")
def command(reference: str, key: str | None, ca_file: str | None, max_audit_age: str | None, as_json: bool) -> int:
    """Check REF (a tag is resolved to the digest the registry serves now) with cosign, key-based and offline: its
    signature, its CycloneDX SBOM attestation and its SLSA v1 provenance attestation, each made for that digest.
    Exit 0 verified; 1 unsigned, signed by another key, an attestation missing or for another digest; 2 bad key.

    \b
    --max-audit-age 7d: also the newest audit attestation (cosign vuln predicate, its result the CycloneDX
    vulnerabilities of `imagebuild audit -m`, attached by a signed push) signed by --key for that digest must be no
    older; none found or too old is exit 1 naming the digest (and the age and the limit). Never "clean" unchecked.

    \b
    Credentials: IMAGEBUILD_REGISTRY_USER + IMAGEBUILD_REGISTRY_PASSWORD, or `docker login`.

    \b
    Example:
      imagebuild verify 127.0.0.1:5000/ml/pytorch-cpu:2.13.0-cpu-py3.11-debian12-runtime --key cosign.pub
    """
    from imagebuild.sign import configured_public_key
    from imagebuild.sign.audit import parse_age
    from imagebuild.sign.verify import check_image

    age = (parse_age(max_audit_age), max_audit_age.strip()) if max_audit_age is not None else None
    public = configured_public_key(key, "--key")  # messages name the option this command has
    if public is None:
        raise UsageError("give --key cosign.pub (or a KMS URI), or set IMAGEBUILD_VERIFY_KEY")
    verified = check_image(reference, public, ca_file=ca_file, max_audit_age=age)
    repo = verified.digest_ref.split("@", 1)[0]
    if as_json:  # an index: each platform image, its digest and its own statements (the index has none)
        members = [{"platform": platform, "digest": digest, "verified": f"{repo}@{digest}",
                    "attestations": verified.member_statements.get(platform, {})}
                   for platform, digest in verified.members.items()]
        click.echo(json.dumps({"reference": reference, "digest": verified.digest, "verified": verified.digest_ref,
                               "key": public.describe(), "attestations": verified.statements,
                               **({"members": members} if members else {}),
                               **({"audits": {d: _audit_facts(st) for d, st in verified.audits.items()}}
                                  if verified.audits else {})}, indent=2))
        return EXIT_OK
    count = len(verified.members)
    click.echo(f"{reference}: verified {verified.digest_ref}"
               + (f" (an image index: each of its {count} platform images verified)" if count else ""))
    click.echo(f"  signature: cosign, key {public.describe()}")
    if not count:
        _describe("  ", verified.statements)
    for platform, digest in verified.members.items():
        click.echo(f"  {platform}: {repo}@{digest}")
        _describe("    ", verified.member_statements.get(platform, {}))
    for digest, statement in verified.audits.items():
        facts = _audit_facts(statement)
        click.echo(f"  audit of {digest[:19]}: {facts['audited']}, {facts['vulnerabilities']} vulnerabilities listed"
                   + (f", not checked: {'; '.join(facts['not_checked'])}" if facts["not_checked"] else ""))
    return EXIT_OK


def _audit_facts(statement: dict[str, Any]) -> dict[str, Any]:
    """What `verify` says of a fresh audit statement: when, how many vulnerabilities, what was not checked."""
    predicate = statement.get("predicate") or {}
    bom = (predicate.get("scanner") or {}).get("result") or {}
    props = (bom.get("metadata") or {}).get("properties") or []
    return {"audited": (predicate.get("metadata") or {}).get("scanFinishedOn"),
            "vulnerabilities": len(bom.get("vulnerabilities") or []),
            "not_checked": [str(p.get("value")) for p in props if isinstance(p, dict)
                            and p.get("name") == "imagebuild:audit:not-checked"]}


def _describe(indent: str, statements: dict[str, Any]) -> None:
    """The SBOM and provenance lines of one image's verified statements."""
    sbom = (statements.get("cyclonedx") or {}).get("predicate") or {}
    prov = ((statements.get("slsaprovenance1") or {}).get("predicate") or {}).get("buildDefinition") or {}
    matrix = ((prov.get("externalParameters") or {}).get("matrix") or {})
    click.echo(f"{indent}sbom: CycloneDX {sbom.get('specVersion', '?')}, {len(sbom.get('components') or [])} "
               "components")
    click.echo(f"{indent}provenance: SLSA v1, matrix {matrix.get('path', '?')} "
               f"(sha256 {str((matrix.get('digest') or {}).get('sha256', '?'))[:12]}), "
               f"{len(prov.get('resolvedDependencies') or [])} resolved dependencies")
