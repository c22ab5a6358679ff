"""Sign one pushed digest and attach what is inside it: the seam push calls between "the registry serves this digest"
and "the tags point at it".

    sign_digest("127.0.0.1:5000/ml/pytorch@sha256:…", key, registry, sbom=…, provenance=…)

runs, in this order (each one an OCI artifact cosign stores beside the image, `sha256-<hex>.sig` / `.att`):

    cosign sign   --key KEY --tlog-upload=false --yes [--allow-http-registry] [--registry-cacert CA] REPO@DIGEST
    cosign attest --key KEY --tlog-upload=false --yes --type cyclonedx       --predicate SBOM REPO@DIGEST
    cosign attest --key KEY --tlog-upload=false --yes --type slsaprovenance1 --predicate PROV REPO@DIGEST
    cosign attest --key KEY --tlog-upload=false --yes --type vuln            --predicate AUDIT REPO@DIGEST  (when the
                                                        record holds an audit of this image ID: sign/audit.py)

Many signers: a signature or an attestation is added beside what the digest carries, never instead of it (no
`cosign attest --replace`: it drops every attestation of the predicate type, whichever key made it), so a second key
(key rotation, two pipelines signing one digest) leaves the first key's verifying, and `verify --key` passes for
each. Re-signing with the same key adds nothing: the signature is skipped when the digest verifies with this key
already (`already_signed`), and then each attestation when this key has attested that type for exactly this digest
(a statement that verifies with the key and names the digest as its subject). So one attestation per key and type
stays on a digest: the first one. A later push of the same bytes (the same digest) does not replace it with a newer
provenance (the bytes it describes are the same); the record says which were kept (`attested_before`).

Any refusal (the registry refusing the upload, a KMS refusing the key) is a SignError naming the image with cosign's
own reason. `vouch` asks the opposite question for an image this run did not push (an index member found in the
registry): is it signed and attested by this key already? (push/publish.py signs no index over anything else)
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.errors import ImagebuildError
from imagebuild.oci import Reference
from imagebuild.sign.cosign import Registry, run_cosign
from imagebuild.sign.keys import PublicKey, SigningKey

PREDICATE_TYPES = {"cyclonedx": "https://cyclonedx.org/bom", "slsaprovenance1": "https://slsa.dev/provenance/v1"}


class SignError(ImagebuildError):
    """Signing or attesting a pushed digest failed (exit 1); the message names the image."""


@dataclass(frozen=True)
class Signed:
    digest_ref: str  # REPO@DIGEST
    key: str  # the key's description (a path or KMS URI; never a secret)
    attestations: tuple[str, ...]  # the predicate types attached
    already: bool = False  # the digest verified with this key before: no second signature
    kept: tuple[str, ...] = ()  # the attestations this key had made for this digest before: none added

    def as_record(self) -> dict[str, Any]:
        return {"key": self.key, "attestations": list(self.attestations), "already_signed": self.already,
                "attested_before": list(self.kept)}


def _signing_flags(key: SigningKey, registry: Registry) -> list[str]:
    return ["--key", key.ref, "--tlog-upload=false", "--yes", *registry.flags()]


@contextmanager
def _public_half(key: SigningKey, public_key_pem: str | None) -> Iterator[PublicKey | None]:
    """The signing key's public half as the file cosign verifies with (None without it), named after the key."""
    if public_key_pem is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="imagebuild-sign-") as tmp:
        pub = Path(tmp) / "cosign.pub"
        pub.write_text(public_key_pem, encoding="utf-8")
        yield PublicKey(str(pub), "--sign-key", label=f"{key.describe()}, its public half")


def _none_there(digest_ref: str, suffix: str, registry: Registry) -> bool:
    """Does the registry hold no cosign artifact of `suffix` (sig, att) beside `digest_ref` at all, of any key? One
    request answers it (a first push: nothing to verify, no cosign run); False when there is one, when
    COSIGN_REPOSITORY keeps them elsewhere, or when the registry cannot say (cosign then asks, as before)."""
    if registry.client is None or os.environ.get("COSIGN_REPOSITORY"):
        return False
    try:
        ref = Reference.parse(digest_ref)
        if ref.digest is None:
            return False
        return registry.client.manifest_digest(ref.repository, ref.digest.replace(":", "-") + "." + suffix) is None
    except (ImagebuildError, ValueError):
        return False


def already_signed(digest_ref: str, public: PublicKey, registry: Registry) -> bool:
    """Does `digest_ref` carry a signature that verifies with this public key? (a re-push signs no second time)"""
    if _none_there(digest_ref, "sig", registry):
        return False
    done = run_cosign(["verify", "--key", public.ref, "--insecure-ignore-tlog", *registry.flags(), digest_ref],
                      registry=registry)
    return done.returncode == 0


def already_attested(digest_ref: str, kind: str, public: PublicKey, registry: Registry) -> bool:
    """Does this key's `kind` attestation of exactly this digest stand on it? (re-signing adds no second one)"""
    from imagebuild.sign.verify import VerifyError, attestation  # verify imports this module

    if _none_there(digest_ref, "att", registry):
        return False
    name, digest = digest_ref.split("@", 1)
    try:
        attestation(name, digest, kind, public, registry, digest_ref)
    except VerifyError:
        return False
    return True


def _signature(digest_ref: str, key: SigningKey, registry: Registry, public: PublicKey | None, refused: str) -> bool:
    """`cosign sign` of `digest_ref` unless it verifies with this key already (returned: it did); SignError
    "REF: <refused>: <cosign's reason>" when cosign refuses."""
    already = _signed_before(digest_ref, registry, public)
    if not already:
        _sign(digest_ref, key, registry, refused)
    return already


def _signed_before(digest_ref: str, registry: Registry, public: PublicKey | None) -> bool:
    if "@sha256:" not in digest_ref:
        raise SignError(f"{digest_ref}: signing needs a digest reference (REPO@sha256:…), never a tag")
    return public is not None and already_signed(digest_ref, public, registry)


def _sign(digest_ref: str, key: SigningKey, registry: Registry, refused: str) -> None:
    done = run_cosign(["sign", *_signing_flags(key, registry), digest_ref], password=key.password, registry=registry)
    if done.returncode != 0:
        raise SignError(f"{digest_ref}: {refused}: {done.error}")


def already_audited(digest_ref: str, predicate: dict[str, Any], public: PublicKey, registry: Registry) -> bool:
    """Does this key's audit attestation of exactly this digest and this audit's time stand on it? (a newer audit of
    the same bytes is added beside the older one; the same audit is not added twice)"""
    from imagebuild.sign.audit import VULN, VULN_PREDICATE_TYPE
    from imagebuild.sign.verify import VerifyError, statements_of  # verify imports this module

    if _none_there(digest_ref, "att", registry):
        return False
    name, digest = digest_ref.split("@", 1)
    try:
        found = statements_of(name, digest, VULN, VULN_PREDICATE_TYPE, public, registry, digest_ref)
    except VerifyError:
        return False
    at = (predicate.get("metadata") or {}).get("scanFinishedOn")
    return any(((st.get("predicate") or {}).get("metadata") or {}).get("scanFinishedOn") == at for st in found)


def sign_digest(digest_ref: str, key: SigningKey, registry: Registry, *, sbom: dict[str, Any],
                provenance: dict[str, Any], public_key_pem: str | None = None,
                audit: dict[str, Any] | None = None) -> Signed:
    """Sign `digest_ref` (REPO@sha256:…) and attest its SBOM and provenance, beside any other key's and once per
    key (see the module docstring), and, given `audit` (sign/audit.vuln_predicate of the record's audit of exactly
    this image), that audit as a `vuln` attestation (once per key and audit time); SignError naming it on any
    refusal. The signature (`.sig`) is written while the attestations (`.att`, one after the other: each adds to
    the same artifact) are: two cosign runs at a time, never two on one artifact."""
    with _public_half(key, public_key_pem) as public, \
            tempfile.TemporaryDirectory(prefix="imagebuild-attest-") as tmp, \
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="cosign-sign") as pool:
        already = _signed_before(digest_ref, registry, public)
        signing = None if already else pool.submit(_sign, digest_ref, key, registry, "not signed")
        try:
            kinds, kept = _attest(digest_ref, key, registry, public, Path(tmp), already, sbom, provenance, audit)
        finally:
            if signing is not None:
                signing.result()  # its refusal first: "not signed" says more than an attestation's
    return Signed(digest_ref, key.describe(), kinds, already, tuple(kept))


def _attest(digest_ref: str, key: SigningKey, registry: Registry, public: PublicKey | None, tmp: Path,
            already: bool, sbom: dict[str, Any], provenance: dict[str, Any],
            audit: dict[str, Any] | None) -> tuple[tuple[str, ...], list[str]]:
    """The attestations sign_digest attaches, one after the other: (their kinds, those this key had made before)."""
    flags = _signing_flags(key, registry)
    kept: list[str] = []
    # what this key attested before is looked for where any attestation stood before this run's: also on a digest
    # not signed yet (a run that failed between the two), never on the ones this run just added
    before = public is not None and (already or not _none_there(digest_ref, "att", registry))
    for kind, predicate in (("cyclonedx", sbom), ("slsaprovenance1", provenance)):
        if before and public is not None and already_attested(digest_ref, kind, public, registry):
            kept.append(kind)
            continue
        path = tmp / f"{kind}.json"
        path.write_text(json.dumps(predicate, sort_keys=True), encoding="utf-8")
        done = run_cosign(["attest", *flags, "--type", kind, "--predicate", str(path), digest_ref],
                          password=key.password, registry=registry)
        if done.returncode != 0:
            raise SignError(f"{digest_ref}: signed, but the {kind} attestation was not attached: {done.error}")
    kinds = tuple(PREDICATE_TYPES)
    if audit is not None:
        kinds += ("vuln",)
        if before and public is not None and already_audited(digest_ref, audit, public, registry):
            kept.append("vuln")
        else:
            path = tmp / "vuln.json"
            path.write_text(json.dumps(audit, sort_keys=True), encoding="utf-8")
            done = run_cosign(["attest", *flags, "--type", "vuln", "--predicate", str(path), digest_ref],
                              password=key.password, registry=registry)
            if done.returncode != 0:
                raise SignError(f"{digest_ref}: signed, but the audit (vuln) attestation was not attached: "
                                f"{done.error}")
    return kinds, kept


def sign_index(digest_ref: str, key: SigningKey, registry: Registry, *, public_key_pem: str | None = None) -> Signed:
    """Sign an image index's digest (REPO@sha256:…) only: what a tag names is signed, and each platform image it
    lists carries its own signature and attestations (verify follows the index to them)."""
    with _public_half(key, public_key_pem) as public:
        already = _signature(digest_ref, key, registry, public, "index not signed")
    return Signed(digest_ref, key.describe(), (), already)


def vouch(digest_ref: str, key: SigningKey, registry: Registry, public_key_pem: str) -> None:
    """Returns when `digest_ref` is signed by this key and carries both attestations made by it for exactly that
    digest (what `imagebuild verify` asks of an image); SignError saying what is missing otherwise."""
    from imagebuild.sign.verify import VerifyError, check_digest  # verify imports this module

    name, digest = digest_ref.split("@", 1)
    with _public_half(key, public_key_pem) as public:
        assert public is not None
        try:
            check_digest(name, digest, public, registry, digest_ref)
        except VerifyError as exc:
            raise SignError(str(exc).removeprefix(f"{digest_ref}: ")) from None
