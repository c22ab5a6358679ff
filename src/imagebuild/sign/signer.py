"""Sign one pushed digest and attach what is inside it: the seam push calls between "the registry serves this digest"
and "the tags point at it".

    sign_digest("127.0.0.1:5000/ml/pytorch@sha256:…", key, registry, sbom=…, provenance=…)

runs, in this order (each one an OCI artifact cosign stores beside the image, `sha256-<hex>.sig` / `.att`):

    cosign sign   --key KEY --tlog-upload=false --yes [--allow-http-registry] [--registry-cacert CA] REPO@DIGEST
    cosign attest --key KEY --tlog-upload=false --yes --replace --type cyclonedx       --predicate SBOM REPO@DIGEST
    cosign attest --key KEY --tlog-upload=false --yes --replace --type slsaprovenance1 --predicate PROV REPO@DIGEST

`--replace` keeps one attestation per type when the same digest is signed again (a re-push); the signature itself is
added once more only when the digest does not already verify with this key (`already_signed`). Any refusal (the
registry refusing the upload, a KMS refusing the key) is a SignError naming the image with cosign's own reason.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.errors import ImagebuildError
from imagebuild.sign.cosign import Registry, run_cosign
from imagebuild.sign.keys import SigningKey

PREDICATE_TYPES = {"cyclonedx": "https://cyclonedx.org/bom", "slsaprovenance1": "https://slsa.dev/provenance/v1"}


class SignError(ImagebuildError):
    """Signing or attesting a pushed digest failed (exit 1); the message names the image."""


@dataclass(frozen=True)
class Signed:
    digest_ref: str  # REPO@DIGEST
    key: str  # the key's description (a path or KMS URI; never a secret)
    attestations: tuple[str, ...]  # the predicate types attached
    already: bool = False  # the digest verified with this key before: only the attestations were replaced

    def as_record(self) -> dict[str, Any]:
        return {"key": self.key, "attestations": list(self.attestations), "already_signed": self.already}


def _signing_flags(key: SigningKey, registry: Registry) -> list[str]:
    return ["--key", key.ref, "--tlog-upload=false", "--yes", *registry.flags()]


def already_signed(digest_ref: str, public_key_pem: str, registry: Registry) -> bool:
    """Does `digest_ref` carry a signature that verifies with this public key? (a re-push signs no second time)"""
    with tempfile.TemporaryDirectory(prefix="imagebuild-sign-") as tmp:
        pub = Path(tmp) / "cosign.pub"
        pub.write_text(public_key_pem, encoding="utf-8")
        done = run_cosign(["verify", "--key", str(pub), "--insecure-ignore-tlog", *registry.flags(), digest_ref],
                          registry=registry)
    return done.returncode == 0


def _signature(digest_ref: str, key: SigningKey, registry: Registry, public_key_pem: str | None,
               refused: str) -> bool:
    """`cosign sign` of `digest_ref` unless it verifies with this key already (returned: it did); SignError
    "REF: <refused>: <cosign's reason>" when cosign refuses."""
    if "@sha256:" not in digest_ref:
        raise SignError(f"{digest_ref}: signing needs a digest reference (REPO@sha256:…), never a tag")
    already = public_key_pem is not None and already_signed(digest_ref, public_key_pem, registry)
    if not already:
        done = run_cosign(["sign", *_signing_flags(key, registry), digest_ref], password=key.password,
                          registry=registry)
        if done.returncode != 0:
            raise SignError(f"{digest_ref}: {refused}: {done.error}")
    return already


def sign_digest(digest_ref: str, key: SigningKey, registry: Registry, *, sbom: dict[str, Any],
                provenance: dict[str, Any], public_key_pem: str | None = None) -> Signed:
    """Sign `digest_ref` (REPO@sha256:…) and attest its SBOM and provenance; SignError naming it on any refusal."""
    already = _signature(digest_ref, key, registry, public_key_pem, "not signed")
    flags = _signing_flags(key, registry)
    with tempfile.TemporaryDirectory(prefix="imagebuild-attest-") as tmp:
        os.chmod(tmp, 0o700)
        for kind, predicate in (("cyclonedx", sbom), ("slsaprovenance1", provenance)):
            path = Path(tmp) / f"{kind}.json"
            path.write_text(json.dumps(predicate, sort_keys=True), encoding="utf-8")
            done = run_cosign(["attest", *flags, "--replace", "--type", kind, "--predicate", str(path), digest_ref],
                              password=key.password, registry=registry)
            if done.returncode != 0:
                raise SignError(f"{digest_ref}: signed, but the {kind} attestation was not attached: {done.error}")
    return Signed(digest_ref, key.describe(), tuple(PREDICATE_TYPES), already)


def sign_index(digest_ref: str, key: SigningKey, registry: Registry, *, public_key_pem: str | None = None) -> Signed:
    """Sign an image index's digest (REPO@sha256:…) only: what a tag names is signed, and each platform image it
    lists carries its own signature and attestations (verify follows the index to them)."""
    already = _signature(digest_ref, key, registry, public_key_pem, "index not signed")
    return Signed(digest_ref, key.describe(), (), already)
