"""Is this image signed by this key, with its SBOM and provenance attested for exactly its digest?

`verify_reference` resolves a tag to the digest the registry serves NOW (a tag moved after signing is checked as
the digest it moved to), then asks cosign, key-based and offline:

    cosign verify             --key PUB --insecure-ignore-tlog [--allow-http-registry] REPO@DIGEST
    cosign verify-attestation --key PUB --insecure-ignore-tlog --type cyclonedx       REPO@DIGEST
    cosign verify-attestation --key PUB --insecure-ignore-tlog --type slsaprovenance1 REPO@DIGEST

and reads what cosign accepted: every signature's claimed digest and every attestation's in-toto subject must be
DIGEST (cosign files attestations by digest but does not compare a statement's subject with it, so an attestation
copied from another image would otherwise pass). Each refusal is a VerifyError naming the image and why: unsigned,
signed by another key, an attestation missing or made for another digest, the tag gone.

An image index (one tag, several platforms) is signed itself, and every platform image it lists is checked as an
image is (signature and both attestations), after its image config was read from the registry and found to be the
platform the index lists it as; an index that lists one platform twice is refused (which one a node pulls is not
the verifier's choice). Each member's statements are kept (`member_statements`; `verify --json` reports them).

`local_image_matches` then ties the verified digest to the image the engine would start: its RepoDigests, or the
manifest's config digest (= the classic store's image ID), or the ID itself (the containerd store's).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from imagebuild.errors import ImagebuildError
from imagebuild.oci import Reference, ReferenceSyntaxError, RegistryClient, RegistryError
from imagebuild.oci.answers import index_entries, is_index, parse_object
from imagebuild.oci.platform import descriptor_platform, normalized, platform_mismatch
from imagebuild.sign import refusals
from imagebuild.sign.audit import VULN, VULN_PREDICATE_TYPE, newest_audit
from imagebuild.sign.cosign import CosignMissing, Registry, cosign_registry, run_cosign
from imagebuild.sign.keys import PublicKey
from imagebuild.sign.signer import PREDICATE_TYPES


class VerifyError(ImagebuildError):
    """The image is not signed and attested as required (exit 1); the message names the image."""


@dataclass(frozen=True)
class Verified:
    reference: str  # as asked
    digest_ref: str  # REPO@DIGEST that was verified
    digest: str
    repository: str  # the path inside its registry (the v2 API's name)
    statements: dict[str, dict[str, Any]] = field(default_factory=dict)  # cosign --type -> the in-toto statement
    members: dict[str, str] = field(default_factory=dict)  # an index's platform -> manifest digest, each verified
    # an index's platform -> its image's statements (cosign --type -> statement); `statements` is then empty
    member_statements: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # `verify --max-audit-age`: the image's (or each platform image's) digest -> its newest fresh audit statement
    audits: dict[str, dict[str, Any]] = field(default_factory=dict)


def _json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, list):
            out += [d for d in doc if isinstance(d, dict)]
        elif isinstance(doc, dict):
            out.append(doc)
    return out


_unsigned_or_other_key = refusals.signature_problem  # cosign's refusals in true words: sign/refusals.py
_attestation_problem = refusals.attestation_problem


def resolve_digest(ref: Reference, client: RegistryClient) -> str:
    """The digest the reference names: its own @digest, else what the registry serves for its tag right now."""
    if ref.digest:
        return ref.digest
    try:
        digest = client.manifest_digest(ref.repository, ref.tag or "latest")
    except RegistryError as exc:
        raise VerifyError(f"{ref}: {refusals.registry_problem(exc)}: {exc}") from None
    if digest is None:
        raise VerifyError(f"{ref}: no such tag in {ref.registry}")
    return digest


def _signature(name: str, digest: str, key: PublicKey, registry: Registry, shown: str) -> None:
    done = run_cosign(["verify", "--key", key.ref, "--insecure-ignore-tlog", *registry.flags(), f"{name}@{digest}"],
                      registry=registry)
    if done.returncode != 0:
        what = _unsigned_or_other_key(done.error)
        raise VerifyError(f"{shown}: {digest} is {what} (key {key.describe()}): {done.error}")
    for sig in _json_lines(done.stdout):
        claimed = ((sig.get("critical") or {}).get("image") or {}).get("docker-manifest-digest")
        if claimed != digest:
            raise VerifyError(f"{shown}: a signature claims {claimed or 'no digest'}, not {digest}")


def _statement(envelope: dict[str, Any]) -> dict[str, Any]:
    try:
        doc = json.loads(base64.b64decode(str(envelope.get("payload") or "")))
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def attestation(name: str, digest: str, kind: str, key: PublicKey, registry: Registry, shown: str) -> dict[str, Any]:
    """The `kind` statement of NAME@DIGEST that verifies with `key` (every one such names DIGEST as its subject);
    VerifyError naming `shown` otherwise."""
    return statements_of(name, digest, kind, PREDICATE_TYPES[kind], key, registry, shown)[-1]


def statements_of(name: str, digest: str, kind: str, predicate_type: str, key: PublicKey, registry: Registry,
                  shown: str) -> list[dict[str, Any]]:
    """Every `kind` statement of NAME@DIGEST that verifies with `key`, each naming DIGEST as its subject (at least
    one); VerifyError naming `shown` otherwise."""
    done = run_cosign(["verify-attestation", "--key", key.ref, "--insecure-ignore-tlog", "--type", kind,
                       *registry.flags(), f"{name}@{digest}"], registry=registry)
    if done.returncode != 0:
        problem = _attestation_problem(done.error)
        if problem in (refusals.OTHER_KEY, refusals.MISSING):  # cosign words a malformed envelope the same
            from imagebuild.oci import resolve_auth

            client = RegistryClient(registry.auth or resolve_auth(registry.host), ca_file=registry.ca_file)
            problem = refusals.envelope_problem(client, name.split("/", 1)[1], digest, key.ref,
                                                predicate_type) or problem
        raise VerifyError(f"{shown}: the {kind} attestation of {digest} is {problem} "
                          f"(key {key.describe()}): {done.error}")
    statements = [s for s in (_statement(e) for e in _json_lines(done.stdout))
                  if s.get("predicateType") == predicate_type]
    if not statements:
        raise VerifyError(f"{shown}: no {kind} attestation of {digest} verifies with key {key.describe()}")
    want = digest.removeprefix("sha256:")
    for st in statements:
        subjects = [str((s.get("digest") or {}).get("sha256") or "") for s in st.get("subject") or []
                    if isinstance(s, dict)]
        if want not in subjects:
            other = ", ".join(f"sha256:{d}" for d in subjects) or "no digest"
            raise VerifyError(f"{shown}: the {kind} attestation attached to {digest} is made for another digest "
                              f"({other}), not this image")
    return statements


def fresh_audit(name: str, digest: str, key: PublicKey, registry: Registry, shown: str, max_age: int, limit: str,
                now: datetime | None = None) -> dict[str, Any]:
    """`verify --max-audit-age`: the newest audit attestation (sign/audit.py, cosign --type vuln) of NAME@DIGEST
    signed by `key` and made for that digest, audited no longer than `max_age` seconds ago; VerifyError naming the
    digest otherwise: none found (never clean), or its age and the limit."""
    try:
        statements = statements_of(name, digest, VULN, VULN_PREDICATE_TYPE, key, registry, shown)
    except VerifyError as exc:
        if f"is {refusals.MISSING} (key" in str(exc) or f"no {VULN} attestation" in str(exc):
            statements = []
        else:
            raise
    try:
        return newest_audit(statements, shown, digest, max_age, limit, now)
    except ValueError as exc:
        raise VerifyError(str(exc)) from None


def check_digest(name: str, digest: str, key: PublicKey, registry: Registry, shown: str) -> dict[str, dict[str, Any]]:
    """NAME@DIGEST's signature and both attestations, each verified with `key` for exactly that digest: the
    statements (cosign --type -> statement); VerifyError naming `shown` otherwise."""
    _signature(name, digest, key, registry, shown)
    return {kind: attestation(name, digest, kind, key, registry, shown) for kind in PREDICATE_TYPES}


def verify_reference(reference: str, key: PublicKey, registry: Registry, client: RegistryClient,
                     max_audit_age: tuple[int, str] | None = None) -> Verified:
    """Verify the signature and both attestations of what `reference` names now (see the module docstring); with
    `max_audit_age` (seconds, as the user wrote it) also a fresh audit attestation of each image (fresh_audit)."""
    try:
        ref = Reference.parse(reference)
    except ReferenceSyntaxError as exc:
        raise VerifyError(f"{reference}: not an image reference ({exc})") from None
    if ref.domain is None:
        raise VerifyError(f"{reference}: names no registry; a signature lives beside the image in its registry "
                          "(give REGISTRY/REPOSITORY:TAG)")
    digest = resolve_digest(ref, client)
    name = f"{ref.registry}/{ref.repository}"
    _signature(name, digest, key, registry, reference)
    members = index_members(client, ref.repository, digest, reference)
    if not members:
        statements = {kind: attestation(name, digest, kind, key, registry, reference) for kind in PREDICATE_TYPES}
        audits = {digest: fresh_audit(name, digest, key, registry, reference, *max_audit_age)} if max_audit_age \
            else {}
        return Verified(reference, f"{name}@{digest}", digest, ref.repository, statements, audits=audits)
    # one tag, several platforms: the index is signed, each platform image is that platform, signed and attested
    each: dict[str, dict[str, dict[str, Any]]] = {}
    for platform, member in members.items():
        shown = f"{reference} ({platform})"
        _member_platform(client, ref.repository, member, platform, shown)
        each[platform] = check_digest(name, member, key, registry, shown)
    audits = {member: fresh_audit(name, member, key, registry, f"{reference} ({platform})", *max_audit_age)
              for platform, member in members.items()} if max_audit_age else {}
    return Verified(reference, f"{name}@{digest}", digest, ref.repository, {}, members, each, audits)


def _member_platform(client: RegistryClient, repository: str, digest: str, platform: str, shown: str) -> None:
    try:
        why = platform_mismatch(client, repository, digest, platform, shown)
    except RegistryError as exc:
        if exc.status == 404:
            raise VerifyError(f"{shown}: the registry no longer serves {digest}") from None
        raise VerifyError(f"{shown}: the platform of {digest} cannot be read: {exc}") from None
    if why:
        raise VerifyError(f"{shown}: {digest} is listed as {platform}, but {why}")


def index_members(client: RegistryClient, repository: str, digest: str, shown: str) -> dict[str, str]:
    """platform -> manifest digest when `digest` is an image index (push/index.py writes one per multi-platform
    image); {} for an image manifest. Read with oci/answers' checks (RegistryError naming the field otherwise); a
    platform listed twice is a VerifyError."""
    try:
        body, media_type, _ = client.manifest_raw(repository, digest)
    except RegistryError as exc:
        if exc.status == 404:
            raise VerifyError(f"{shown}: the registry no longer serves {digest}") from None
        raise
    doc = parse_object(body, f"{shown} ({digest})")
    if not is_index(doc, media_type):
        return {}
    members: dict[str, str] = {}
    seen: dict[str, str] = {}
    for entry in index_entries(doc, f"{shown} ({digest})"):
        if "unknown" in (entry.platform.get("os"), entry.platform.get("architecture")):
            continue  # BuildKit's attestation manifests: not an image a node runs
        name = descriptor_platform(entry.platform)
        if not name:
            raise VerifyError(f"{shown}: the image index {digest} lists {entry.digest} without a platform")
        if normalized(name) in seen:
            raise VerifyError(f"{shown}: the image index {digest} lists {name} twice ({seen[normalized(name)]} and "
                              f"{entry.digest}): which one a node pulls is not the signer's choice; refused")
        seen[normalized(name)] = entry.digest
        members[name] = entry.digest
    if not members:
        raise VerifyError(f"{shown}: {digest} is an image index that lists no platform image")
    return members


def local_image_matches(inspect: dict[str, Any], verified: Verified, client: RegistryClient) -> bool:
    """Is the engine's image (its inspect data) the verified digest's image?"""
    if verified.digest_ref in (inspect.get("RepoDigests") or []):
        return True
    image_id = str(inspect.get("Id") or "")
    if image_id == verified.digest:
        return True
    for digest in [verified.digest, *verified.members.values()]:
        if image_id == digest or f"{verified.digest_ref.split('@', 1)[0]}@{digest}" in (inspect.get("RepoDigests") or []):
            return True
        try:
            found = client.manifest(verified.repository, digest)
        except RegistryError:
            return False
        config = (found[1].get("config") or {}) if found is not None else {}
        if isinstance(config, dict) and config.get("digest") == image_id:
            return True
    return False


def check_image(reference: str, key: PublicKey, *, inspect: dict[str, Any] | None = None,
                ca_file: str | None = None, max_audit_age: tuple[int, str] | None = None) -> Verified:
    """What `verify`, `run`, `export` and `slurm` ask: `reference` verified (credentials as push finds them:
    IMAGEBUILD_REGISTRY_USER/PASSWORD, else the docker config) and, given the engine's inspect data of the image
    about to be used, that image is the verified digest's. VerifyError naming the image otherwise."""
    from imagebuild.oci import resolve_auth

    try:
        ref = Reference.parse(reference)
    except ReferenceSyntaxError:
        ref = None
    if ref is None or ref.domain is None:
        raise VerifyError(f"{reference}: no registry reference to verify; a signature lives beside the pushed image "
                          f"in its registry, so a local name or ID cannot be checked against key {key.describe()} "
                          "(give REGISTRY/REPOSITORY:TAG)")
    client = RegistryClient(resolve_auth(ref.registry), ca_file=ca_file)
    try:
        registry = cosign_registry(client, ca_file)
        verified = verify_reference(reference, key, registry, client, max_audit_age)
    except RegistryError as exc:
        raise VerifyError(f"{reference}: {refusals.registry_problem(exc)}: {exc}") from None
    except CosignMissing as exc:
        raise VerifyError(f"{reference}: not verified: {exc}") from None
    if inspect is not None and not local_image_matches(inspect, verified, client):
        local = str(inspect.get("Id") or "?")
        raise VerifyError(f"{reference}: the engine's image {local[:19]} is not the signed {verified.digest} the "
                          f"registry serves for it now; pull it (docker pull {verified.digest_ref}) and start that")
    return verified


def attached_statements(client: RegistryClient, repository: str, digest: str, predicate_type: str,
                        shown: str) -> list[dict[str, Any]]:
    """Every in-toto statement of `predicate_type` attached to `digest` (cosign's `sha256-<hex>.att`: one DSSE envelope
    per layer, its base64 payload the statement), read from the registry WITHOUT checking any signature (`audit`
    of a tag without --verify-key: the caller says so). [] when none is attached. Each must name `digest` as its
    subject: one made for another digest is a VerifyError, as is an envelope that is not JSON / base64 / a statement
    (naming `shown`, the digest and the key that is wrong)."""
    at = f"{shown}@{digest}" if "@" not in shown else shown
    try:
        found = client.manifest(repository, digest.replace(":", "-") + ".att")
    except RegistryError as exc:
        raise VerifyError(f"{at}: its attestations cannot be read: {refusals.registry_problem(exc)}: {exc}") from None
    if found is None:
        return []
    layers = found[1].get("layers")
    if not isinstance(layers, list):
        raise VerifyError(f"{at}: the attestation manifest {digest.replace(':', '-')}.att: `layers` is not a list")
    want = digest.removeprefix("sha256:")
    out: list[dict[str, Any]] = []
    for n, layer in enumerate(layers[:64]):
        layer_digest = layer.get("digest") if isinstance(layer, dict) else None
        if not isinstance(layer_digest, str):
            raise VerifyError(f"{at}: the attestation manifest's layers[{n}].digest is missing")
        try:
            body = client.blob(repository, layer_digest, max_bytes=64 << 20)
        except RegistryError as exc:
            raise VerifyError(f"{at}: attestation layer {layer_digest} cannot be read: {exc}") from None
        try:
            env = json.loads(body)
        except ValueError:
            raise VerifyError(f"{at}: attestation layer {layer_digest} is not JSON (no DSSE envelope)") from None
        if not isinstance(env, dict):
            raise VerifyError(f"{at}: attestation layer {layer_digest} is not a DSSE envelope (not a JSON object)")
        try:
            statement = json.loads(base64.b64decode(str(env.get("payload") or ""), validate=True))
        except ValueError:
            raise VerifyError(f"{at}: attestation layer {layer_digest}: `payload` is not a base64 in-toto statement") \
                from None
        if not isinstance(statement, dict):
            raise VerifyError(f"{at}: attestation layer {layer_digest}: `payload` is not an in-toto statement")
        if statement.get("predicateType") != predicate_type:
            continue
        subject = statement.get("subject")
        subjects = [str((s.get("digest") or {}).get("sha256") or "") for s in subject
                    if isinstance(s, dict) and isinstance(s.get("digest"), dict)] if isinstance(subject, list) else []
        if want not in subjects:
            other = ", ".join(f"sha256:{d}" for d in subjects) or "no digest"
            raise VerifyError(f"{at}: the {predicate_type} attestation attached to {digest} is made for another "
                              f"digest ({other}), not this image; refused")
        out.append(statement)
    return out
