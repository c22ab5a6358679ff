"""Signed images with what is inside attached: cosign (key file or KMS, key-based, no transparency log) signs each
pushed digest and attests its CycloneDX SBOM and a SLSA v1 provenance made from the record; `verify_reference`
checks all three against a public key for the digest a tag names now.

    from imagebuild.sign import SigningKey, cosign_registry, sign_digest, verify_reference
    key = SigningKey.from_option("cosign.key", password)     # UsageError: missing file, not a private key
    pem = key.public_key()                                   # UsageError: wrong password (before anything is pushed)
    sign_digest("127.0.0.1:5000/ml/pytorch@sha256:…", key, cosign_registry(client), sbom=…, provenance=…)

Nothing here talks to the engine; the registry through imagebuild.oci and cosign (sign/cosign.py, the one runner).
"""

from __future__ import annotations

from imagebuild.sign.cosign import CosignMissing, Registry, cosign_registry, find_cosign, run_cosign, version
from imagebuild.sign.keys import (
    ENV_SIGN_KEY,
    ENV_VERIFY_KEY,
    PublicKey,
    SigningKey,
    configured_public_key,
    is_kms,
)
from imagebuild.sign.provenance import make_provenance
from imagebuild.sign.signer import PREDICATE_TYPES, Signed, SignError, sign_digest, sign_index
from imagebuild.sign.verify import Verified, VerifyError, local_image_matches, verify_reference

__all__ = [
    "ENV_SIGN_KEY", "ENV_VERIFY_KEY", "PREDICATE_TYPES", "CosignMissing", "PublicKey", "Registry", "SignError",
    "Signed", "SigningKey", "Verified", "VerifyError", "configured_public_key", "cosign_registry", "find_cosign",
    "is_kms", "local_image_matches", "make_provenance", "run_cosign", "sign_digest", "sign_index", "verify_reference", "version",
]
