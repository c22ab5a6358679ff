"""`imagebuild audit --image docker://REGISTRY/REPO:TAG`: a pushed image audited by the CycloneDX SBOM a signed push
attested for its digest (sign/signer.py), without pulling it.

The tag is resolved to a digest ONCE (an image index: the platform image for --platform, default this host's) and
everything after reads that digest: the SBOM attestation attached to it (cosign's `sha256-<hex>.att`) must name it
as the in-toto subject (one made for another digest is refused), and the SBOM's image ID must be that manifest's
config digest. With a verify key, cosign checks the digest's signature and attestations first (sign/verify.py's
check_digest); without one the result says plainly that the SBOM was not verified (a "not checked" source: exit 3
at best). The SBOM becomes an Inventory (inventory/from_sbom.py), audited like a local image's (auditing.py).
Each refusal is one ImagebuildError naming the digest: none attached, damaged (the key that is wrong), another
digest's, the signature.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from imagebuild.audit.model import CHECKED, NOT_CHECKED, SourceStatus
from imagebuild.errors import ImagebuildError
from imagebuild.inventory.from_sbom import SbomError, parse_sbom, read_sbom
from imagebuild.inventory.model import Inventory
from imagebuild.oci import Reference, ReferenceSyntaxError, RegistryClient, RegistryError

if TYPE_CHECKING:
    from imagebuild.compat import Tables
    from imagebuild.sign.keys import PublicKey

REGISTRY_PREFIX = "docker://"
NO_SBOM_HINT = ("push it with --sign-key to attach one (imagebuild push --sign-key cosign.key), or audit a local "
                "image: --image TAG")


@dataclass(frozen=True)
class RegistryRead:
    digest: str  # the manifest digest audited (an index's platform image)
    digest_ref: str  # REGISTRY/REPO@DIGEST
    inventory: Inventory
    status: SourceStatus  # the SBOM's: verified with the key (checked) or read unverified (not checked)


def is_registry_audit(text: str, client: Any) -> bool:
    """`docker://REF`, or a reference naming its registry that the engine (`client`, None: none asked) lacks."""
    if text.startswith(REGISTRY_PREFIX):
        return True
    try:
        ref = Reference.parse(text)
    except ReferenceSyntaxError:
        return False
    if ref.domain is None:
        return False
    if client is None:
        return True
    from imagebuild.inventory import find_image

    return find_image(client, text) is None


def codenames(tables: Tables) -> dict[tuple[str, str], str]:
    """(os-release ID, VERSION_ID) -> codename of every OS compat knows (the SBOM names the release, not the codename)."""
    return {(row.family, str(row.version)): row.codename for row in tables.os.values()}


def _pick_member(members: dict[str, str], platform: str | None, shown: str, digest: str) -> str:
    from imagebuild.inventory.from_registry import host_platform
    from imagebuild.oci.platform import normalized

    want = platform or host_platform()
    for name, member in members.items():
        if normalized(name) == normalized(want):
            return member
    raise ImagebuildError(f"{shown}: the image index {digest} has no {want} image; it has: {', '.join(sorted(members))}"
                          " (--platform OS/ARCH)")


def _sbom_doc(statement: dict[str, Any]) -> dict[str, Any]:
    predicate = statement.get("predicate")
    if isinstance(predicate, (str, bytes)):  # a predicate stored as JSON text
        return parse_sbom(predicate)
    if not isinstance(predicate, dict):
        raise SbomError(f"predicate: {'missing' if predicate is None else 'not a JSON object'}")
    return parse_sbom(predicate)


def registry_inventory(text: str, tables: Tables, *, verify_key: PublicKey | None = None, ca_file: str | None = None,
                       platform: str | None = None, say: Callable[[str], None] = lambda _m: None,
                       client: RegistryClient | None = None) -> RegistryRead:
    """The inventory of the pushed image `text` names, from the SBOM attested for its digest (see the module
    docstring); ImagebuildError naming the digest otherwise."""
    from imagebuild.sign.signer import PREDICATE_TYPES
    from imagebuild.sign.verify import VerifyError, attached_statements, index_members, resolve_digest

    ref_text = text.removeprefix(REGISTRY_PREFIX)
    try:
        ref = Reference.parse(ref_text)
    except ReferenceSyntaxError as exc:
        raise ImagebuildError(f"{text!r} is not an image reference: {exc}") from None
    if ref.domain is None:
        raise ImagebuildError(f"{text}: names no registry; a pushed image's SBOM lives beside it in its registry "
                              "(give docker://REGISTRY/REPO:TAG)")
    if client is None:
        from imagebuild.oci import resolve_auth

        client = RegistryClient(resolve_auth(ref.registry), ca_file=ca_file, log=say)
    name = f"{ref.registry}/{ref.repository}"
    try:
        digest = resolve_digest(ref, client)  # once: everything below reads this digest, never the tag again
        members = index_members(client, ref.repository, digest, text)
        target = _pick_member(members, platform, text, digest) if members else digest
        at = f"{name}@{target}"
        found = attached_statements(client, ref.repository, target, PREDICATE_TYPES["cyclonedx"], at)
        if not found:
            raise ImagebuildError(f"{at}: no SBOM attestation is attached to {target}; {NO_SBOM_HINT}")
        if verify_key is not None:
            from imagebuild.sign.cosign import CosignMissing, cosign_registry
            from imagebuild.sign.verify import check_digest

            try:
                statement = check_digest(name, target, verify_key, cosign_registry(client, ca_file), at)["cyclonedx"]
            except CosignMissing as exc:
                raise ImagebuildError(f"{at}: not verified: {exc}") from None
            status = SourceStatus("sbom", CHECKED, f"the CycloneDX attestation of {at}, its signature and "
                                                   f"attestations verified with key {verify_key.describe()}")
        else:
            statement = found[-1]
            status = SourceStatus("sbom", NOT_CHECKED, f"the SBOM attached to {at} was NOT VERIFIED (no "
                                                       "--verify-key): read without checking its signature")
        config = _config_digest(client, ref.repository, target)
    except VerifyError:
        raise
    except RegistryError as exc:
        from imagebuild.sign import refusals

        raise ImagebuildError(f"{name}: {refusals.registry_problem(exc)}: {exc}") from None
    try:
        inv = read_sbom(_sbom_doc(statement), text, codenames(tables))
    except SbomError as exc:
        raise ImagebuildError(f"{at}: the attached SBOM is damaged: {exc}") from None
    if inv.image_id and config and inv.image_id != config:
        raise ImagebuildError(f"{at}: the attached SBOM describes image {inv.image_id}, but {target}'s config is "
                              f"{config}; refused")
    say(f"audit: {text}: the SBOM attested for {at}" + ("" if verify_key else " (not verified: no --verify-key)"))
    return RegistryRead(target, at, inv, status)


def _config_digest(client: RegistryClient, repository: str, digest: str) -> str:
    found = client.manifest(repository, digest)
    config = found[1].get("config") if found is not None else None
    value = config.get("digest") if isinstance(config, dict) else None
    return value if isinstance(value, str) else ""
