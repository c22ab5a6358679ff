"""What a refusal means, in words that are true (issue 39, item 7): cosign's refusal of a signature or attestation,
and a registry's refusal of a request.

cosign 2.5's own messages, as read from a real registry (tests/unit/test_refusals.py keeps them):

    no signatures found                                                  -> unsigned
    no matching signatures: invalid signature when validating ASN.1 ...  -> signed by another key (a well-formed
                                                                            signature that this key does not verify)
    no matching signatures: illegal base64 data at input byte 3          -> its signature is malformed
    no matching signatures: invalid signature when validating IEEE_P1363 -> its signature is malformed (not the DER
    no matching signatures: ecdsa: Invalid IEEE_P1363 encoded bytes         signature cosign writes: no key's)
    no matching signatures: invalid character 'o' in literal null        -> its signed payload is malformed
    no matching signatures: invalid or missing digest in claim: sha256:… -> signed for another digest
    GET …/manifests/sha256-….sig: UNAUTHORIZED: authentication required  -> authentication failed (not "unsigned")
    no matching attestations:                                            -> missing
    no matching attestations: unable to base64 decode payload            -> malformed
    no matching attestations: accepted signatures do not match threshold -> signed by another key, or malformed:
                                                                            cosign says the same for both, so the
                                                                            envelopes are read (`envelope_problem`)
    none of the attestations matched the predicate type: cyclonedx       -> missing, or malformed (cosign drops an
                                                                            envelope it cannot verify): read too
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path

from imagebuild.oci import RegistryClient, RegistryError
from imagebuild.oci.registry import RegistryAuthError

UNSIGNED = "unsigned"
OTHER_KEY = "signed by another key"
MALFORMED = "malformed"
OTHER_DIGEST = "made for another digest, not this image"
MISSING = "missing"
AUTH_FAILED = "not verified: the registry refused the credentials (authentication failed)"
DENIED = "not verified: the registry denied access"

_AUTH = ("unauthorized", "authentication required", "http 401", "status 401", "401 unauthorized", "no basic auth")
_DENIED = ("denied", "forbidden", "http 403", "status 403")
_MALFORMED_SIG = ("illegal base64", "ieee_p1363", "asn1: structure error", "asn1: syntax error", "malformed")
_MALFORMED_PAYLOAD = ("invalid character", "unexpected end of json", "cannot unmarshal", "error unmarshaling",
                      "unexpected eof", "unable to base64 decode")
_MALFORMED = _MALFORMED_SIG + _MALFORMED_PAYLOAD
_EC_PUBLIC_KEY = bytes.fromhex("2a8648ce3d0201")  # OID 1.2.840.10045.2.1 id-ecPublicKey, inside a PEM's DER


def _registry_refused(low: str) -> str | None:
    if any(w in low for w in _AUTH):
        return AUTH_FAILED
    if any(w in low for w in _DENIED):
        return DENIED
    return None


def signature_problem(reason: str) -> str:
    """cosign verify's refusal (its `Error:` line) in words."""
    low = reason.lower()
    refused = _registry_refused(low)
    if refused:
        return refused
    if "no signatures found" in low:
        return UNSIGNED
    if "missing digest in claim" in low:
        return "signed for another digest, not this image"
    if any(w in low for w in _MALFORMED_SIG):
        return "not verified: its signature is malformed (not one cosign writes; no key verifies it)"
    if any(w in low for w in _MALFORMED_PAYLOAD):
        return "not verified: its signed payload is malformed (not a cosign claim)"
    if "invalid signature" in low or "no matching signatures" in low or "verification failed" in low \
            or "verification error" in low:
        return OTHER_KEY
    return "not verified"


def attestation_problem(reason: str) -> str:
    """cosign verify-attestation's refusal in words (OTHER_KEY where cosign cannot tell it from a malformed one:
    `envelope_problem` then reads the envelopes)."""
    low = reason.lower()
    refused = _registry_refused(low)
    if refused:
        return refused
    if "subject digest" in low:  # cosign compares the statement's subject with the digest it was filed under
        return OTHER_DIGEST
    if "none of the attestations matched" in low:
        return MISSING
    if any(w in low for w in _MALFORMED):
        return MALFORMED
    if "do not match threshold" in low or "invalid signature" in low:
        return OTHER_KEY
    if "no matching attestations" in low:
        return MISSING
    return signature_problem(reason)


def registry_problem(exc: RegistryError) -> str:
    """A registry's refusal in words: a 401 is an authentication failure, a 403 a denial, not "does not answer"."""
    if isinstance(exc, RegistryAuthError) or exc.status in (401, 403):
        return "authentication failed" if exc.status != 403 else "access denied"
    if exc.status == 404:
        return "not found"
    return "the registry does not answer"


def _der_ecdsa(sig: bytes) -> bool:
    """Is `sig` an ECDSA-Sig-Value (SEQUENCE { INTEGER r, INTEGER s }, DER) — what cosign writes for an EC key?"""
    def length(at: int) -> tuple[int, int] | None:
        if at >= len(sig):
            return None
        first = sig[at]
        if first < 0x80:
            return first, at + 1
        n = first & 0x7F
        if n == 0 or n > 2 or at + 1 + n > len(sig):
            return None
        return int.from_bytes(sig[at + 1:at + 1 + n], "big"), at + 1 + n

    if len(sig) < 8 or sig[0] != 0x30:
        return False
    got = length(1)
    if got is None or got[0] + got[1] != len(sig):
        return False
    at = got[1]
    for _ in range(2):
        if at >= len(sig) or sig[at] != 0x02:
            return False
        got = length(at + 1)
        if got is None or got[0] == 0:
            return False
        at = got[1] + got[0]
    return at == len(sig)


def _is_ec_key(key_ref: str) -> bool:
    """Is the public key file an EC key (cosign's default)? False for a KMS URI or anything unreadable."""
    try:
        text = Path(key_ref).read_text(encoding="utf-8")
    except (OSError, ValueError):
        return False
    body = "".join(ln for ln in text.splitlines() if ln and not ln.startswith("-----"))
    try:
        return _EC_PUBLIC_KEY in base64.b64decode(body)
    except (binascii.Error, ValueError):
        return False


def _b64(text: object) -> bytes | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _one_envelope(body: bytes, ec_key: bool, predicate_type: str | None) -> str | None:
    try:
        env = json.loads(body)
    except ValueError:
        return "a layer is not JSON, no DSSE envelope"
    payload = _b64(env.get("payload")) if isinstance(env, dict) else None
    if payload is None:
        return "a DSSE payload is not base64"
    try:
        statement = json.loads(payload)
    except ValueError:
        return "a DSSE payload is not an in-toto statement (not JSON)"
    if predicate_type and isinstance(statement, dict) and statement.get("predicateType") != predicate_type:
        return None  # another type's attestation: not the one asked about
    sigs = env.get("signatures")
    if not isinstance(sigs, list) or not sigs:
        return "a DSSE envelope holds no signature"
    for entry in sigs:
        raw = _b64(entry.get("sig")) if isinstance(entry, dict) else None
        if raw is None:
            return "a signature is not base64"
        if ec_key and not _der_ecdsa(raw):
            return "a signature is not a DER-encoded ECDSA signature, not one cosign writes"
    return None


def envelope_problem(client: RegistryClient, repository: str, digest: str, key_ref: str,
                     predicate_type: str | None = None) -> str | None:
    """Why the attestations stored for `digest` (cosign's `sha256-<hex>.att`; of `predicate_type` where an envelope's
    payload says its type) are malformed, or None when every one is well formed (then cosign's words stand: another
    key's, or missing). Unreadable: None."""
    try:
        found = client.manifest(repository, digest.replace(":", "-") + ".att")
        if found is None:
            return None
        layers = found[1].get("layers")
        if not isinstance(layers, list):
            return f"{MALFORMED} (the attestation manifest lists no layers)"
        ec_key = _is_ec_key(key_ref)
        for layer in layers[:32]:
            layer_digest = layer.get("digest") if isinstance(layer, dict) else None
            if not isinstance(layer_digest, str):
                return f"{MALFORMED} (a layer without a digest)"
            problem = _one_envelope(client.blob(repository, layer_digest, max_bytes=4 << 20), ec_key, predicate_type)
            if problem:
                return f"{MALFORMED} ({problem})"
    except RegistryError:
        return None
    return None
