"""The push step's signer: given a signing key (`push --sign-key`, `build --push --sign-key`, IMAGEBUILD_SIGN_KEY),
every pushed digest is signed and carries its SBOM and provenance (imagebuild.sign), through push's one seam
(`push.SignPushed`: called with REPO@DIGEST after the registry serves the digest, before an alias names it).

The key is opened before anything is pushed (`cosign public-key`): a missing key, a file that is not a private key
or a wrong password stops the run with one line and nothing pushed. `push` opens it in the background (`KeyCheck`)
while it reads the record and prepares the first image, and the pusher waits for it before its first write
(push/pusher.py `before_write`): a quarter of a second of a first signed push no longer waits in line. The SBOM
attested is the one `build` wrote for this very image ID (the record's `sbom`, its sha256 checked), else one made
now (pipeline/supply.py: from what was kept of the image with the state, else read from the image); the provenance
is made from the record and the lock (sign/provenance.py).

An index is signed over members this run pushed, or members the registry holds that this key signed and attested
already (`vouch`, push/publish.py asks it); signatures and attestations go beside other keys', once per key
(sign/signer.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from imagebuild.errors import UsageError
from imagebuild.lock.model import Lock
from imagebuild.lock.model import load as load_lock
from imagebuild.models import ImagePlan, Plan
from imagebuild.oci import RegistryAuth, RegistryClient
from imagebuild.pipeline.loaded import RecordBook, Say
from imagebuild.pipeline.settings import PushSettings
from imagebuild.pipeline.supply import Sboms
from imagebuild.push import SignIndex, SignPushed, Vouch
from imagebuild.record.derived import Derived
from imagebuild.sign import (
    CosignMissing,
    SignError,
    SigningKey,
    cosign_registry,
    make_provenance,
    sign_digest,
    sign_index,
)
from imagebuild.sign import version as cosign_version
from imagebuild.sign.signer import vouch


def _lock(plan: Plan) -> tuple[Lock | None, str | None]:
    if not plan.lock_file:
        return None, None
    try:
        data = Path(plan.lock_file).read_bytes()
        return load_lock(plan.lock_file), "sha256:" + hashlib.sha256(data).hexdigest()
    except (OSError, ValueError):
        return None, None


def _recorded_sbom(book: RecordBook, image: ImagePlan, image_id: str | None) -> tuple[dict[str, Any], str] | None:
    """(the SBOM build wrote for exactly this image ID, its file's sha256 as the record and report name it)"""
    entry = book.record.image(image.id) if book.record is not None else None
    sbom = (entry.sbom or {}) if entry is not None else {}
    path = Path(str(sbom.get("path") or ""))
    if not image_id or sbom.get("image_id") != image_id or not path.is_file():
        return None
    data = path.read_bytes()
    if "sha256:" + hashlib.sha256(data).hexdigest() != sbom.get("sha256"):
        return None
    doc: dict[str, Any] = json.loads(data)
    return doc, str(sbom["sha256"])


def _audit_predicate(book: RecordBook, image: ImagePlan, image_id: str | None, say: Say) -> dict[str, Any] | None:
    """The vuln predicate (sign/audit.py) of the record's audit of exactly `image_id`, None (said) without one."""
    from imagebuild.audit.cyclonedx import vulnerabilities_bom
    from imagebuild.sign.audit import vuln_predicate

    audits = book.record.audits if book.record is not None else {}
    entry = audits.get(image_id or "")
    if not image_id or not isinstance(entry, dict) or entry.get("image_id") != image_id:
        say(f"{image.tag}: no audit of {str(image_id)[:19]} in the record: no audit attestation attached "
            "(imagebuild audit -m MATRIX first; verify --max-audit-age will refuse it)")
        return None
    return vuln_predicate(entry, vulnerabilities_bom(entry))


def _named(images: list[ImagePlan]) -> str:
    return images[0].tag + (f" (and {len(images) - 1} more)" if len(images) > 1 else "") if images else "push"


def open_signing_key(settings: PushSettings, images: list[ImagePlan]) -> tuple[SigningKey, str] | None:
    """(the key, its public half) when the run signs; UsageError naming the images when the key cannot sign."""
    check = KeyCheck.start(settings, images, ask_version=False)  # nothing here says cosign's version
    return None if check is None else (check.key, check.public())


class KeyCheck:
    """The signing key's file read now (a missing file, a public key: UsageError at once) and `cosign public-key`
    run in the background; `public()` waits for its public half (UsageError, or CosignMissing, naming the images
    when the password or the key is refused). cosign's version is asked beside it when the run will say it."""

    def __init__(self, key: SigningKey, images: list[ImagePlan], ask_version: bool = True) -> None:
        self.key, self._named = key, _named(images)
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="imagebuild-key")
        self._public: Future[str] = pool.submit(key.public_key)
        self._version: Future[str] | None = pool.submit(cosign_version) if ask_version else None
        pool.shutdown(wait=False)  # both run on; the interpreter waits for them at exit

    @classmethod
    def start(cls, settings: PushSettings, images: list[ImagePlan], ask_version: bool = True) -> KeyCheck | None:
        """None when the run does not sign."""
        if not settings.sign_key:
            return None
        try:
            return cls(SigningKey.from_option(settings.sign_key, settings.sign_password), images, ask_version)
        except (UsageError, CosignMissing) as exc:
            raise type(exc)(f"{_named(images)}: not pushed: {exc}") from None

    def public(self) -> str:
        try:
            return self._public.result()
        except (UsageError, CosignMissing) as exc:
            raise type(exc)(f"{self._named}: not pushed: {exc}") from None

    def cosign_version(self) -> str:
        if self._version is None:
            return "version not asked"
        try:
            return self._version.result()
        except Exception as exc:  # said in the line that names the key; the key's own check says what is wrong
            return f"version unknown: {exc}"


def signer(client: Any, plan: Plan, book: RecordBook, settings: PushSettings, key: SigningKey,
           public: Callable[[], str], image_ids: dict[str, str], auth_for: Any,
           say: Say) -> tuple[SignPushed, SignIndex, Vouch]:
    """push.SignPushed for this run (SBOM + provenance per image), push.SignIndex (an index's signature) and
    push.Vouch (an index member this run did not push: signed and attested by this key?), cosign through the push's
    own credentials. `public`: the key's public half (KeyCheck.public: the pusher waited for it before any of
    these runs)."""
    lock, lock_sha = _lock(plan)
    registries: dict[str, Any] = {}
    sboms = Sboms(client, plan, Derived(book.state_dir, say))  # an image read before: its kept files

    def registry_for(host: str) -> Any:
        if host not in registries:
            auth: RegistryAuth = auth_for(host)
            registries[host] = cosign_registry(RegistryClient(auth, ca_file=settings.ca_file), settings.ca_file)
        return registries[host]

    def sign_pushed(image: ImagePlan, digest_ref: str) -> dict[str, Any]:
        image_id = image_ids.get(image.tag)
        recorded = _recorded_sbom(book, image, image_id)
        if recorded is None:  # build wrote none for this very image: kept with the state, else read now
            if not image_id:
                raise SignError(f"{image.tag}: no local image to read its SBOM from")
            try:
                text = sboms.text(image_id)
            except Exception as exc:  # the engine lost the image, an unreadable layer: not signed, said
                raise SignError(f"{image.tag}: no SBOM to attest ({exc})") from None
            sbom, sbom_sha = json.loads(text), "sha256:" + hashlib.sha256(text.encode()).hexdigest()
            say(f"{image.tag}: build recorded no SBOM for {image_id[:19]}: attesting the one the state keeps "
                "for it (else read from the image now)")
        else:
            sbom, sbom_sha = recorded
        digest = digest_ref.split("@", 1)[1]
        provenance = make_provenance(plan, image, book.record, lock, digest, sbom_sha, lock_sha)
        host = digest_ref.split("/", 1)[0]
        signed = sign_digest(digest_ref, key, registry_for(host), sbom=sbom, provenance=provenance,
                             public_key_pem=public(), audit=_audit_predicate(book, image, image_id, say))
        return signed.as_record()

    def index_signed(digest_ref: str) -> dict[str, Any]:
        host = digest_ref.split("/", 1)[0]
        return sign_index(digest_ref, key, registry_for(host), public_key_pem=public()).as_record()

    def vouched(digest_ref: str) -> None:
        vouch(digest_ref, key, registry_for(digest_ref.split("/", 1)[0]), public())

    return sign_pushed, index_signed, vouched
