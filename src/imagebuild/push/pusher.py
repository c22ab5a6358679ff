"""Push built images (full tag + aliases): written to the registry BY DIGEST, verified, then tagged.

Two steps per image and repository, so that something can happen between them (a signer signs the digest):
1. `write_by_digest`: an image the engine holds in the requested form (push/asheld.py) is sent from this process
   (push/upload.py); otherwise skopeo (push/skopeo.py) compresses the engine's image (zstd with OCI media types by
   default, gzip with Docker media types on request) and writes it. Either way its blobs and manifest go as
   `name@digest`; no tag moves. The registry is then asked for that digest and must serve exactly it.
2. `point_tags`: each tag is a manifest PUT of the same bytes; then each tag must serve the digest.
Signing (`sign_pushed`, the seam the pipeline fills when a signing key is given) runs once per image with
`REPO@DIGEST`, and the tags move only once it is done and the registry serves the digest: a refusal fails the image
with every tag where it was, so no tag ever names an unsigned digest and nothing needs rolling back. It signs the
digest of the bytes this push prepared and checked (the manifest that hashes to it, every layer sent hashed against
its descriptor), so it starts as soon as they are ready, beside the upload (`Prepared.fill` done, before the copy),
in the background (`begin_image`, then `PendingPush.finish`): push_plan writes the next image while one is signed
(issue 44: cosign's runs were a third of a first signed push, and the upload waited for none of them). cosign signs
a digest without reading the image (its signatures and attestations are artifacts of their own beside it). An image
whose tags all name its digest already is signed again (the signature is what a re-push with a key promises). A
failure in step 1 (a registry that refuses OCI or zstd, a lost connection) leaves every tag where it was; a
signature already made then names a digest no tag names (the error says so), found as this key's by the next push.

`before_write` (the signing key's check, pipeline/signing.py) is waited for before anything is written: the upload,
a signature, a tag. It runs while the image is prepared; a refusal is `Stopped`, raised out of push_plan with
nothing written.

Per reference: skip when the registry's tag already serves the digest the image compresses to (zstd and gzip output
are deterministic: the same image gives the same digest). Only blobs the registry lacks are sent (it is asked for each
before: `bytes` counts what went over the wire, compressed). Transient failures (5xx, 429, connection reset/refused,
timeouts, EOF) are retried by the one retry policy (imagebuild.retry, ENGINE_PUSH), at most `retries` more times.
Authentication and authorization failures are never retried: the credentials are checked against the registry
before the first push (`RegistryClient.check_auth`), so a wrong password fails at once with the registry's message.

Which references an image is pushed under (full tag + the aliases it owns) is the plan's decision
(`imagebuild.plan.tags.references`); references are parsed with `imagebuild.oci.Reference`, and the registry is asked
with `imagebuild.oci.RegistryClient`.
"""

from __future__ import annotations

import tarfile
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from imagebuild.engine.store import ImageStore, as_store
from imagebuild.engine.stream import EngineError
from imagebuild.errors import ImagebuildError
from imagebuild.models import ImagePlan
from imagebuild.oci import (
    Reference,
    ReferenceSyntaxError,
    RegistryAuth,
    RegistryAuthError,
    RegistryClient,
    RegistryError,
)
from imagebuild.oci.answers import image_manifest, parse_object
from imagebuild.push.failures import PushAuthError, PushError, Stopped, Transient, classify, refused_message
from imagebuild.push.skopeo import DEFAULT_COMPRESSION, CopyError, Prepared, Skopeo, refused_format
from imagebuild.push.upload import send_held
from imagebuild.retry import ENGINE_PUSH, RetryPolicy
from imagebuild.secrets import redact

if TYPE_CHECKING:
    from imagebuild.engine.store import EngineClient

DEFAULT_RETRIES = ENGINE_PUSH.retries
# (image, "REPO@sha256:…") -> what the record keeps of the signature; raises an ImagebuildError to refuse the push
SignPushed = Callable[[ImagePlan, str], dict[str, Any]]
# "REPO@sha256:…" of an index -> what the record keeps of its signature (the platform images carry the attestations)
SignIndex = Callable[[str], dict[str, Any]]

class Copier(Protocol):
    """What writes an image to a registry by digest (push/skopeo.py's Skopeo)."""

    def prepare(self, image_id: str, compression: str) -> Prepared: ...

    def send(self, prepared: Prepared, name: str, auth: RegistryAuth, *, plain_http: bool,
             ca_file: str | None = None) -> None: ...

    def close(self) -> None: ...


class Pusher:
    def __init__(
        self,
        engine: ImageStore | EngineClient,  # a docker client from engine.connect("push"): its timeout fits big saves
        auth: RegistryAuth,
        *,
        registry_client: RegistryClient | None = None,
        retries: int = DEFAULT_RETRIES,
        backoff: float = ENGINE_PUSH.backoff,
        max_backoff: float = ENGINE_PUSH.max_backoff,
        sleep: Callable[[float], None] = time.sleep,
        log: Callable[[str], None] = lambda _m: None,
        ca_file: str | None = None,
        compression: str = DEFAULT_COMPRESSION,
        copier: Copier | None = None,
        sign_pushed: SignPushed | None = None,
        before_write: Callable[[], object] | None = None,
    ):
        self.store: ImageStore = as_store(engine)
        self.auth = auth
        self.policy = RetryPolicy(retries, backoff, max_backoff)
        self.sleep = sleep
        self.log = log
        self.ca_file = ca_file
        self.compression = compression
        self.registry = registry_client or RegistryClient(auth, ca_file=ca_file, sleep=sleep, log=log)
        self.copier: Copier = copier or Skopeo(self.store, log=log)
        self.sign_pushed = sign_pushed  # the digest prepared and checked, before any tag moves
        self._before_write = before_write  # waited for before the first write; its refusal: Stopped
        self._auth_checked: set[str] = set()
        self._signer: ThreadPoolExecutor | None = None  # begin_image's signing, one image at a time

    def close(self) -> None:
        if self._signer is not None:
            self._signer.shutdown(wait=True)
        self.copier.close()

    def may_write(self) -> None:
        """Wait for `before_write` (every time: it answers at once once it has); its refusal is Stopped."""
        if self._before_write is not None:
            try:
                self._before_write()
            except ImagebuildError as exc:
                raise Stopped(exc) from None

    # -- one image ---------------------------------------------------------------------------------------------
    def push_image(self, image: ImagePlan, refs: list[str] | None = None, *, hold: bool = False,
                   known: str | None = None) -> dict[str, Any]:
        """Push `image` under `refs` (default: its tag). Returns the ImageResult.push record; raises PushAuthError
        on refused credentials, returns status "failed" for anything else that went wrong. `hold`: written by
        digest (and signed) only, no tag moved: an index (push/index.py) takes its references over. `known`: the
        digest the record says this very image was pushed as, with this compression: when the registry serves it
        under every reference already, the image is unchanged without being saved and compressed again."""
        return self.begin_image(image, refs, hold=hold, known=known).finish()

    def begin_image(self, image: ImagePlan, refs: list[str] | None = None, *, hold: bool = False,
                    known: str | None = None) -> PendingPush:
        """push_image in two halves: the image written by digest to every repository, its signing started in the
        background (one at a time); `finish()` waits for the signature, then moves the tags and gives the record.
        So push_plan writes the next image while this one is signed, and no tag ever names an unsigned digest."""
        refs = refs or [image.tag]
        started = time.monotonic()
        rec: dict[str, Any] = {"status": "failed", "registry": self.auth.registry, "digest": None, "tags": list(refs),
                               "pushed": [], "unchanged": [], "attempts": 0, "bytes": 0, "layers_pushed": 0,
                               "layers_existing": 0, "seconds": 0.0, "compression": self.compression}
        signing: Future[dict[str, Any]] | None = None
        try:
            image_id = self._image_id(image.tag)
            by_repo = self.by_repository(refs)
            if known is not None and self._still_served(image, by_repo, known, hold, rec):
                rec["status"] = "unchanged"
                return PendingPush(self, rec, started)
            prepared: Prepared | None = None
            moves: list[tuple[str, list[Reference]]] = []  # (repository, the tags to point at the digest)
            sign_in = next(iter(by_repo))  # the repository whose REPO@DIGEST is signed

            def start_signing() -> None:
                """The prepared digest's signing, once, in the background (module doc)."""
                nonlocal signing
                if self.sign_pushed is not None and signing is None and prepared is not None:
                    self.may_write()
                    if self._signer is None:
                        self._signer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="imagebuild-sign")
                    signing = self._signer.submit(self._signed, image, sign_in, prepared.digest)

            for name, tags in by_repo.items():
                repo_path = tags[0].repository
                self.check_auth(repo_path)
                if prepared is None:
                    prepared = self._prepare(image_id)
                    rec["digest"] = prepared.digest
                    rec["size"] = len(prepared.manifest)
                    rec["layer_media_types"] = sorted({m for _, _, m in prepared.layers})
                    rec["media_type"] = prepared.media_type
                if hold:
                    if self.served(repo_path, prepared.digest) != prepared.digest:
                        self.write_by_digest(prepared, name, repo_path, rec, ready=start_signing)
                        rec["pushed"].append(f"{name}@{prepared.digest}")
                    else:
                        rec["unchanged"].append(f"{name}@{prepared.digest}")
                    rec["held"] = [str(t) for t in tags]
                    continue
                todo = [t for t in tags if self.served(repo_path, str(t.tag)) != prepared.digest]
                for t in tags:
                    if t not in todo:
                        self.log(f"{t}: unchanged ({prepared.digest[:19]}), skipped")
                        rec["unchanged"].append(str(t))
                if todo:
                    self.write_by_digest(prepared, name, repo_path, rec, ready=start_signing)
                    moves.append((repo_path, todo))
            start_signing()  # every reference served the digest already: signed again (module doc)
            return PendingPush(self, rec, started, signing, moves, prepared)
        except (PushAuthError, Stopped):
            raise
        except ImagebuildError as exc:  # PushError, RegistryError, CopyError
            rec["error"] = redact(str(exc)) + _signed_anyway(signing)
            return PendingPush(self, rec, started)

    def _still_served(self, image: ImagePlan, by_repo: dict[str, list[Reference]], digest: str, hold: bool,
                      rec: dict[str, Any]) -> bool:
        """Does every reference (`hold`: every repository, by digest) serve `digest`, the recorded push of this image?
        Then `rec` is filled from the registry's manifest (signed again when the run signs) and nothing is prepared."""
        for tags in by_repo.values():
            repo_path = tags[0].repository
            self.check_auth(repo_path)
            wanted = [digest] if hold else [str(t.tag) for t in tags]
            if any(self.served(repo_path, w) != digest for w in wanted):
                return False
        first = next(iter(by_repo.values()))
        try:
            body, media_type, served = self.registry.manifest_raw(first[0].repository, digest)
        except RegistryAuthError as exc:
            raise PushAuthError(str(exc)) from exc
        except RegistryError:  # gone since: pushed again the whole way
            return False
        if served != digest:
            return False
        layers = image_manifest(parse_object(body, f"{first[0]}@{digest}"), f"{first[0]}@{digest}").layers
        rec.update(digest=digest, size=len(body), media_type=media_type,
                   layer_media_types=sorted({layer.media_type for layer in layers}), layers_existing=len(layers),
                   recorded=True)
        for name, tags in by_repo.items():
            if self.sign_pushed is not None and "signed" not in rec:
                rec["signed"] = self._signed(image, name, digest)
            if hold:
                rec["unchanged"].append(f"{name}@{digest}")
                rec["held"] = [str(t) for t in tags]
            else:
                rec["unchanged"] += [str(t) for t in tags]
        self.log(f"{image.tag}: unchanged ({digest[:19]}, as the record pushed this image), skipped without "
                 "saving or compressing it")
        return True

    def _signed(self, image: ImagePlan, name: str, digest: str) -> dict[str, Any]:
        """sign_pushed for the digest just written: what the record keeps of the signature; a refusal is a PushError
        and moves no tag (no rollback needed)."""
        assert self.sign_pushed is not None
        self.may_write()
        try:
            signed = self.sign_pushed(image, f"{name}@{digest}")
        except PushAuthError:
            raise
        except ImagebuildError as exc:
            raise PushError(f"{redact(str(exc))}; no tag was moved to the unsigned {digest}") from None
        self.log(f"{name}@{digest[:19]}: signed (+ SBOM and provenance attestations)")
        return signed

    def _image_id(self, tag: str) -> str:
        try:
            info = self.store.inspect(tag)
        except EngineError as exc:
            raise PushError(f"{tag}: engine: {exc}") from exc
        if info is None:
            raise PushError(f"{tag}: not built (no such local image)")
        return str(info["Id"])

    def by_repository(self, refs: list[str]) -> dict[str, list[Reference]]:
        """`refs` parsed (each checked: this registry, a tag, no digest) and grouped by repository name."""
        by_repo: dict[str, list[Reference]] = {}
        for ref in refs:
            parsed = self.parse(ref)
            by_repo.setdefault(parsed.name, []).append(parsed)
        return by_repo

    def parse(self, ref: str) -> Reference:
        try:
            parsed = Reference.parse(ref)
        except ReferenceSyntaxError as exc:
            raise PushError(f"{ref}: {exc}") from None
        if parsed.registry != self.auth.registry:
            raise PushError(f"{ref}: not in registry {self.auth.registry}")
        if not parsed.tag or parsed.digest:
            raise PushError(f"{ref}: a pushed reference needs a tag and no digest")
        return parsed

    def check_auth(self, repo_path: str) -> None:
        if repo_path in self._auth_checked:
            return
        try:
            self.registry.check_auth(repo_path)
        except RegistryAuthError as exc:
            raise PushAuthError(str(exc)) from exc
        self._auth_checked.add(repo_path)

    def served(self, repo_path: str, reference: str) -> str | None:
        try:
            return self.registry.manifest_digest(repo_path, reference)
        except RegistryAuthError as exc:
            raise PushAuthError(str(exc)) from exc

    def _prepare(self, image_id: str) -> Prepared:
        try:
            prepared = self.copier.prepare(image_id, self.compression)
        except EngineError as exc:
            raise PushError(f"{image_id[:19]}: engine: {exc}") from exc
        if prepared.as_held:
            self.log(f"{image_id[:19]}: {len(prepared.layers)} {prepared.compression} layers as the engine holds them "
                     f"(nothing compressed): {prepared.digest}")
        else:
            self.log(f"{image_id[:19]}: {len(prepared.layers)} layers compressed with {prepared.compression} "
                     f"({prepared.reused} of them from the compressed-layer cache): {prepared.digest}")
        return prepared

    # -- the two steps -----------------------------------------------------------------------------------------
    def write_by_digest(self, prepared: Prepared, name: str, repo_path: str, rec: dict[str, Any],
                        ready: Callable[[], None] = lambda: None) -> str:
        """Blobs the registry lacks + the manifest as `name@digest` (no tag); the digest once the registry serves
        exactly it. Counts what was sent into `rec`. `ready` is called once every blob to send is in the layout,
        checked, before the first byte is sent (begin_image starts the signing there)."""
        def lacking() -> list[tuple[str, int]]:
            return [(d, n) for d, n in prepared.blobs if not self.registry.blob_exists(repo_path, d)]

        missing = lacking()
        layers = {d for d, _, _ in prepared.layers}
        if prepared.fill is not None:  # the kept archive's layers: only those the registry lacks are copied out
            wanted = list(dict.fromkeys(d for d, _ in missing if d in layers))
            self.log(f"{name}@{prepared.digest[:19]}: {len(wanted)} of {len(layers)} layers copied out of the archive "
                     "the build kept (the registry has the others)")
            try:
                prepared.fill(wanted)
            except (OSError, tarfile.TarError) as exc:
                raise PushError(f"{name}@{prepared.digest}: the archive the build kept cannot be read ({exc})") \
                    from None
        self.may_write()
        ready()
        attempts = [0]

        def attempt() -> None:
            attempts[0] += 1
            rec["attempts"] += 1
            try:
                if prepared.as_held and isinstance(self.registry, RegistryClient):  # push/upload.py
                    # what an attempt that failed left in the registry is not sent again
                    send_held(self.registry, repo_path, prepared, lacking() if attempts[0] > 1 else missing)
                else:
                    self.copier.send(prepared, name, self.auth, plain_http=self.registry.scheme() == "http",
                                     ca_file=self.ca_file)
            except RegistryAuthError as exc:
                raise PushAuthError(str(exc)) from None
            except RegistryError as exc:
                message = redact(str(exc))
                if exc.transient:
                    raise Transient(message) from None
                if exc.status in (400, 415) and refused_format(message):
                    raise PushError(refused_message(self.auth.registry, prepared.compression,
                                                    message.rsplit(": ", 1)[-1])) from None
                raise PushError(message) from None
            except CopyError as exc:
                message = str(exc)
                if refused_format(message):  # the registry's own words, without skopeo's long prefix
                    detail = ": ".join(message.split(": ")[-2:])
                    raise PushError(refused_message(self.auth.registry, prepared.compression, detail)) from None
                kind = classify(message)
                if kind == "auth":
                    raise PushAuthError(message) from None
                if kind == "fatal":
                    raise PushError(message) from None
                raise Transient(message) from None

        ref = f"{name}@{prepared.digest}"
        try:
            self.policy.call(attempt, retryable=lambda exc: isinstance(exc, Transient), sleep=self.sleep,
                             on_retry=lambda exc, n, wait: self.log(
                                 f"{ref}: {exc}; retry {n}/{self.policy.retries} in {wait:.1f}s"))
        except Transient as exc:
            raise PushError(f"{ref}: gave up after {attempts[0]} attempts: {exc}") from None
        served = self.served(repo_path, prepared.digest)
        if served != prepared.digest:
            raise PushError(f"{ref}: written, but the registry serves {served or 'nothing'} for that digest")
        rec["bytes"] += sum(n for _, n in missing)
        rec["layers_pushed"] += sum(1 for d, _ in missing if d in layers)
        rec["layers_existing"] += len(layers) - sum(1 for d, _ in missing if d in layers)
        self.log(f"{ref}: written ({sum(1 for d, _ in missing if d in layers)} layers uploaded, "
                 f"{sum(n for _, n in missing)} bytes)")
        return prepared.digest

    def point_tags(self, repo_path: str, tags: list[Reference], digest: str, manifest: bytes,
                   media_type: str) -> None:
        """Each tag -> the manifest (or index) already written by digest (a PUT of the same bytes), then checked."""
        self.may_write()
        for ref in tags:
            tag = str(ref.tag)
            try:
                self.registry.put_manifest(repo_path, tag, manifest, media_type)
            except RegistryAuthError as exc:
                raise PushAuthError(str(exc)) from exc
            served = self.served(repo_path, tag)
            if served != digest:
                raise PushError(f"{ref}: tagged {digest} but the registry serves {served or 'nothing'}")
            self.log(f"{ref}: -> {digest}")


def _signed_anyway(signing: Future[dict[str, Any]] | None) -> str:
    """What a failed push's message adds when its digest's signing had started (waited for here): the signature
    made names a digest no tag names."""
    if signing is None:
        return ""
    try:
        signing.result()
    except Exception:  # its refusal says nothing the push's own error does not
        return ""
    return "; its signature and attestations were written (they name that digest, which no tag names)"


class PendingPush:
    """An image Pusher.begin_image wrote by digest: `finish()` waits for its signature (when the run signs), then
    points its tags at the digest and gives the ImageResult.push record."""

    def __init__(self, pusher: Pusher, rec: dict[str, Any], started: float,
                 signing: Future[dict[str, Any]] | None = None, moves: list[tuple[str, list[Reference]]] | None = None,
                 prepared: Prepared | None = None) -> None:
        self.pusher, self.rec, self.started, self.signing = pusher, rec, started, signing
        # nothing written (unchanged, or failed before the image was prepared): nothing left to finish
        self.moves, self.prepared, self.done = moves or [], prepared, prepared is None

    def finish(self) -> dict[str, Any]:
        rec = self.rec
        if not self.done:
            self.done = True
            try:
                if self.signing is not None:
                    rec["signed"] = self.signing.result()
                assert self.prepared is not None
                for repo_path, todo in self.moves:
                    self.pusher.point_tags(repo_path, todo, self.prepared.digest, self.prepared.manifest,
                                           self.prepared.media_type)
                    rec["pushed"] += [str(t) for t in todo]
                rec["status"] = "pushed" if rec["pushed"] else "unchanged"
            except PushAuthError:
                raise
            except ImagebuildError as exc:  # PushError, RegistryError, a signer's refusal
                rec["error"] = redact(str(exc))
        rec["seconds"] = round(time.monotonic() - self.started, 2)
        return rec
