"""Push built images (full tag + aliases) through the engine's image store, reading every chunk of the push stream.

The engine answers a push with HTTP 200 and reports failures as `{"error": ..., "errorDetail": ...}` chunks; each one
fails the attempt (engine.stream reads them). Attempts that failed for a transient reason (5xx, 429, connection
reset/refused, timeouts, EOF, "blob upload unknown") are retried by the one retry policy (imagebuild.retry,
ENGINE_PUSH), at most `retries` more times. Authentication and
authorization failures are never retried: the credentials are checked against the registry before the first push
(`RegistryClient.check_auth`), so a wrong password fails at once with the registry's own message; an "unauthorized"
from the engine after a good check (the engine lost the auth challenge to a failed ping) is re-checked and retried
as transient only when the registry still accepts the credentials.

Which references an image is pushed under (full tag + the aliases it owns) is the plan's decision
(`imagebuild.plan.tags.references`); references are parsed with `imagebuild.oci.Reference`, and the registry is asked
with `imagebuild.oci.RegistryClient`.

Per reference: skip when the registry's manifest digest for the tag is one of the local image's RepoDigests for that
repository (already there); otherwise push, take the digest from the stream (`aux.Digest`, or the
`<tag>: digest: sha256:… size: N` line), then verify that the registry serves exactly that digest for the tag.

Signing (`sign_pushed`, the seam the pipeline fills when a signing key is given): called once per image with
`REPO@DIGEST` after the first reference's digest is verified and BEFORE any alias points at it. The engine's push
cannot upload without setting that first tag, so when signing fails the tag is rolled back: put back on the digest
it named before, or, when it is new, the unsigned manifest is deleted; the error says which (or that the registry
refused and the tag still names the unsigned digest). A push by digest (tags set last) needs no rollback: call
`sign_pushed` between the upload and the first tag.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from imagebuild.engine.store import ImageStore, as_store
from imagebuild.engine.stream import EngineError, EngineStreamError, read_stream
from imagebuild.errors import ImagebuildError
from imagebuild.models import ImagePlan, ImageResult, Plan
from imagebuild.oci import (
    Reference,
    ReferenceSyntaxError,
    RegistryAuth,
    RegistryAuthError,
    RegistryClient,
    RegistryError,
)
from imagebuild.plan.tags import references
from imagebuild.retry import ENGINE_PUSH, RetryPolicy
from imagebuild.secrets import redact

if TYPE_CHECKING:
    from imagebuild.engine.store import EngineClient

DEFAULT_RETRIES = ENGINE_PUSH.retries
# (image, "REPO@sha256:…") -> what the record keeps of the signature; raises an ImagebuildError to refuse the push
SignPushed = Callable[[ImagePlan, str], dict[str, Any]]

_DIGEST_LINE = re.compile(r"digest: (sha256:[0-9a-f]{64}) size: (\d+)")
_AUTH = re.compile(r"unauthorized|authentication required|\bdenied\b|forbidden|\b40[13]\b|insufficient_scope",
                   re.I)
_DENIED = re.compile(r"\bdenied\b|forbidden|\b403\b|insufficient_scope", re.I)
_TRANSIENT = re.compile(
    r"\b5\d\d\b|too ?many ?requests|\b429\b|connection reset|broken pipe|connection refused|timeout|timed out|"
    r"\bEOF\b|blob upload unknown|blob_upload_unknown|TLS handshake|server misbehaving|temporary failure|"
    r"unavailable|use of closed network connection|connection aborted",
    re.I,
)


class PushError(ImagebuildError):
    """A push failed (exit 1)."""


class PushAuthError(PushError):
    """The registry refused the credentials or the access (exit 1, never retried)."""


class _Transient(Exception):
    """One push attempt failed for a reason worth another (the message says which)."""


def classify(message: str) -> str:
    """'auth' | 'transient' | 'fatal' for an error from the push stream or the engine API."""
    if _AUTH.search(message):
        return "auth"
    if _TRANSIENT.search(message):
        return "transient"
    return "fatal"


@dataclass
class StreamResult:
    digest: str | None = None
    size: int | None = None
    errors: list[str] = field(default_factory=list)
    layers_pushed: int = 0
    layers_existing: int = 0  # "Layer already exists" / "Mounted from ..."
    bytes_pushed: int = 0  # sum of the progress totals of the layers the engine uploaded (uncompressed bytes)
    retries_by_engine: int = 0  # the engine's own per-layer "Retrying in N seconds"


def parse_push_stream(chunks: Iterable[dict[str, Any]], on_chunk: Callable[[dict[str, Any]], None] | None = None) -> StreamResult:
    """Read the whole stream (never stop at the first chunk): every `error`/`errorDetail` counts."""
    res = StreamResult()
    totals: dict[str, int] = {}
    retrying: set[str] = set()

    def take(chunk: dict[str, Any]) -> None:
        if on_chunk:
            on_chunk(chunk)
        aux = chunk.get("aux")
        if isinstance(aux, dict) and aux.get("Digest"):
            res.digest = aux["Digest"]
            res.size = aux.get("Size", res.size)
        status = str(chunk.get("status") or "")
        layer = chunk.get("id")
        m = _DIGEST_LINE.search(status)
        if m and not res.digest:
            res.digest, res.size = m.group(1), int(m.group(2))
        if status == "Pushing" and layer:
            total = (chunk.get("progressDetail") or {}).get("total") or 0
            totals[layer] = max(totals.get(layer, 0), int(total))
        elif status == "Pushed" and layer:
            res.layers_pushed += 1
            res.bytes_pushed += totals.get(layer, 0)
        elif (status == "Layer already exists" or status.startswith("Mounted from")) and layer:
            res.layers_existing += 1
        elif status.startswith("Retrying in") and layer and layer not in retrying:
            retrying.add(layer)
            res.retries_by_engine += 1

    try:
        read_stream(chunks, take)
    except EngineStreamError as exc:
        res.errors += exc.messages
    return res


class Pusher:
    def __init__(
        self,
        engine: ImageStore | EngineClient,  # a docker client from engine.connect("push"): its timeout fits big uploads
        auth: RegistryAuth,
        *,
        registry_client: RegistryClient | None = None,
        retries: int = DEFAULT_RETRIES,
        backoff: float = ENGINE_PUSH.backoff,
        max_backoff: float = ENGINE_PUSH.max_backoff,
        sleep: Callable[[float], None] = time.sleep,
        log: Callable[[str], None] = lambda _m: None,
        ca_file: str | None = None,
        sign_pushed: SignPushed | None = None,
    ):
        self.store: ImageStore = as_store(engine)
        self.sign_pushed = sign_pushed
        self.auth = auth
        self.policy = RetryPolicy(retries, backoff, max_backoff)
        self.sleep = sleep
        self.log = log
        self.registry = registry_client or RegistryClient(auth, ca_file=ca_file, sleep=sleep, log=log)
        self._auth_checked: set[str] = set()

    # -- one image ---------------------------------------------------------------------------------------------
    def push_image(self, image: ImagePlan, refs: list[str] | None = None) -> dict[str, Any]:
        """Push `image` under `refs` (default: its tag). Returns the ImageResult.push record; raises PushAuthError
        on refused credentials, returns status "failed" for anything else that went wrong."""
        refs = refs or [image.tag]
        started = time.monotonic()
        rec: dict[str, Any] = {"status": "failed", "registry": self.auth.registry, "digest": None, "tags": list(refs),
                     "pushed": [], "unchanged": [], "attempts": 0, "bytes": 0, "layers_pushed": 0,
                     "layers_existing": 0, "seconds": 0.0}
        try:
            inspect = self._inspect(image.tag)
            local_digests = self._local_digests(inspect, image.repository)
            for n, ref in enumerate(refs):
                before = self._push_ref(ref, inspect["Id"], local_digests, rec)
                if n == 0 and self.sign_pushed is not None:  # before any alias names the digest
                    self._sign(image, ref, before, rec)
            rec["status"] = "pushed" if rec["pushed"] else "unchanged"
        except PushAuthError:
            raise
        except (PushError, RegistryError) as exc:
            rec["error"] = redact(str(exc))
        rec["seconds"] = round(time.monotonic() - started, 2)
        return rec

    def _inspect(self, tag: str) -> dict[str, Any]:
        try:
            info = self.store.inspect(tag)
        except EngineError as exc:
            raise PushError(f"{tag}: engine: {exc}") from exc
        if info is None:
            raise PushError(f"{tag}: not built (no such local image)")
        return info

    @staticmethod
    def _local_digests(inspect: dict[str, Any], repository: str) -> set[str]:
        out = set()
        for rd in inspect.get("RepoDigests") or []:
            name, _, digest = rd.partition("@")
            if name == repository:
                out.add(digest)
        return out

    def _check_auth(self, repo_path: str) -> None:
        if repo_path in self._auth_checked:
            return
        try:
            self.registry.check_auth(repo_path)
        except RegistryAuthError as exc:
            raise PushAuthError(str(exc)) from exc
        self._auth_checked.add(repo_path)

    def _sign(self, image: ImagePlan, ref: str, before: str | None, rec: dict[str, Any]) -> None:
        """sign_pushed for the digest the first reference now names; on refusal, the tag is rolled back."""
        assert self.sign_pushed is not None
        parsed = Reference.parse(ref)
        digest = str(rec["digest"])
        try:
            rec["signed"] = self.sign_pushed(image, f"{parsed.name}@{digest}")
        except PushAuthError:
            raise
        except ImagebuildError as exc:
            raise PushError(f"{redact(str(exc))}; {self._roll_back(parsed, before, digest)}") from None
        self.log(f"{ref}: signed {digest[:19]} (+ SBOM and provenance attestations)")

    def _roll_back(self, ref: Reference, before: str | None, digest: str) -> str:
        """Leave no tag on an unsigned digest this push set; says what was done."""
        repo_path, tag = ref.repository, ref.tag or "latest"
        if before == digest:
            return f"{ref} named {digest} before this push (left as it was)"
        try:
            if before:
                body, media, _ = self.registry.manifest_raw(repo_path, before)
                self.registry.put_manifest(repo_path, tag, body, media)
                return f"{ref} points at its previous {before} again"
            self.registry.delete_manifest(repo_path, digest)
            return f"the unsigned {digest} is deleted from {ref.name} (the new tag {tag} with it)"
        except RegistryError as exc:
            return f"{ref} STILL names the unsigned {digest} (rollback refused: {exc}); delete it by hand"

    def _push_ref(self, ref: str, image_id: str, local_digests: set[str], rec: dict[str, Any]) -> str | None:
        """Push one reference; returns the digest the tag named before (None: a new tag)."""
        try:
            parsed = Reference.parse(ref)
        except ReferenceSyntaxError as exc:
            raise PushError(f"{ref}: {exc}") from None
        if parsed.registry != self.auth.registry:
            raise PushError(f"{ref}: not in registry {self.auth.registry}")
        if not parsed.tag or parsed.digest:
            raise PushError(f"{ref}: a pushed reference needs a tag and no digest")
        repo, tag, repo_path = parsed.name, parsed.tag, parsed.repository
        self._check_auth(repo_path)
        try:
            remote = self.registry.manifest_digest(repo_path, tag)
        except RegistryAuthError as exc:
            raise PushAuthError(str(exc)) from exc
        if remote and remote in local_digests:
            self.log(f"{ref}: unchanged ({remote[:19]}), skipped")
            rec["unchanged"].append(ref)
            rec["digest"] = rec["digest"] or remote
            return remote
        if self._local_id(ref) != image_id:  # missing, or a moving alias still on the previous build
            self.store.tag(image_id, repo, tag, force=True)
        result = self._push_with_retries(repo, tag, repo_path, rec)
        try:
            served = self.registry.manifest_digest(repo_path, tag)
        except RegistryAuthError as exc:
            raise PushAuthError(str(exc)) from exc
        if served != result.digest:
            raise PushError(f"{ref}: pushed digest {result.digest} but the registry serves {served or 'nothing'}")
        self.log(f"{ref}: pushed {result.digest} ({result.layers_pushed} layers uploaded, "
                 f"{result.layers_existing} already there)")
        rec["pushed"].append(ref)
        rec["digest"] = rec["digest"] or result.digest
        rec["size"] = result.size
        rec["bytes"] += result.bytes_pushed
        rec["layers_pushed"] += result.layers_pushed
        rec["layers_existing"] += result.layers_existing
        if rec["digest"] != result.digest:
            raise PushError(f"{ref}: digest {result.digest} differs from {rec['digest']} pushed for the same image")
        return remote

    def _local_id(self, ref: str) -> str | None:
        return self.store.image_id(ref)

    def _push_with_retries(self, repo: str, tag: str, repo_path: str, rec: dict[str, Any]) -> StreamResult:
        ref = f"{repo}:{tag}"
        attempts = [0]

        def attempt() -> StreamResult:
            attempts[0] += 1
            rec["attempts"] += 1
            try:
                result = parse_push_stream(self.store.push(repo, tag, auth_config=self.auth.sdk_auth_config()))
                if not result.errors and not result.digest:
                    result.errors.append("push stream ended without a digest (EOF)")
            except EngineError as exc:
                result = StreamResult(errors=[str(exc) if exc.connection else f"engine: {exc}"])
                if exc.status and exc.status >= 500 and classify(result.errors[0]) == "fatal":
                    result.errors[0] += " (5xx)"
            if not result.errors:
                return result
            message = "; ".join(dict.fromkeys(result.errors))
            kind = classify(message)
            if kind == "auth":
                if _DENIED.search(message):
                    raise PushAuthError(f"{ref}: {message}")
                self._auth_checked.discard(repo_path)
                self._check_auth(repo_path)  # raises when the registry refuses the credentials
                kind = "transient"  # credentials are good: the engine lost the auth challenge (failed ping)
                message += " (the registry accepts the credentials: retrying as transient)"
            if kind == "fatal":
                raise PushError(f"{ref}: {message}")
            raise _Transient(message)

        try:
            return self.policy.call(attempt, retryable=lambda exc: isinstance(exc, _Transient), sleep=self.sleep,
                                    on_retry=lambda exc, n, wait: self.log(
                                        f"{ref}: {exc}; retry {n}/{self.policy.retries} in {wait:.1f}s"))
        except _Transient as exc:
            raise PushError(f"{ref}: gave up after {attempts[0]} attempts: {exc}") from None


def _push_registry(tag: str) -> str | None:
    """The registry `tag` is pushed to; None when it names none (`pytorch:…`, `ml/pytorch:…` are local or Docker Hub
    names: pushing them needs an explicit registry). Raises ReferenceSyntaxError for a tag that is not a reference."""
    ref = Reference.parse(tag)
    return ref.registry if ref.domain is not None else None


def result_for(image: ImagePlan) -> ImageResult:
    return ImageResult.of(image)


def gate(image: ImagePlan, row: dict[str, Any] | None, require_tests: bool) -> str | None:
    """Why `image` must not be pushed, from its build-report row (None: push it)."""
    status = (row or {}).get("status")
    if status in ("failed", "not-built"):
        return f"build {status}"
    if status == "skipped":
        return "build skipped"
    if not require_tests:
        return None
    tests = (row or {}).get("tests")
    if not tests:
        return "not tested (run `imagebuild test` first, or push with --untested)"
    if tests.get("failed"):
        return f"{tests['failed']} smoke test(s) failed"
    return None


def push_plan(
    plan: Plan,
    *,
    client: ImageStore | EngineClient,
    auth_for: Callable[[str], RegistryAuth],
    images: list[ImagePlan] | None = None,
    report_rows: dict[str, dict[str, Any]] | None = None,
    require_tests: bool = True,
    retries: int = DEFAULT_RETRIES,
    log: Callable[[str], None] = lambda _m: None,
    ca_file: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
    sign_pushed: SignPushed | None = None,
) -> list[ImageResult]:
    """Push the selected images of `plan` (default: all) that were built (and tested, unless require_tests=False).

    Returns one ImageResult per selected image with `push` filled: status pushed | unchanged | failed | skipped
    (+ "reason"). Raises PushAuthError (exit 1) when a registry refuses the credentials."""
    selected = images if images is not None else plan.images
    rows = report_rows or {}
    results: list[ImageResult] = []
    pushers: dict[str, Pusher] = {}
    for image in selected:
        res = result_for(image)
        refs = references(image)
        reason = gate(image, rows.get(image.tag), require_tests)
        registry = None
        if reason is None:
            try:
                registry = _push_registry(image.tag)
            except ReferenceSyntaxError as exc:
                log(f"{image.tag}: push failed: {exc}")
                res.push = {"status": "failed", "error": f"{image.tag}: {exc}", "tags": refs}
                results.append(res)
                continue
            if registry is None:
                reason = "no registry in the tag (set `registry` in the matrix or pass --registry)"
        if reason or registry is None:
            log(f"{image.tag}: not pushed: {reason}")
            res.push = {"status": "skipped", "reason": reason, "tags": refs}
            results.append(res)
            continue
        if registry not in pushers:
            pushers[registry] = Pusher(client, auth_for(registry), retries=retries, log=log, ca_file=ca_file,
                                       sleep=sleep, sign_pushed=sign_pushed)
        res.push = pushers[registry].push_image(image, refs)
        if res.push["status"] == "failed":
            log(f"{image.tag}: push failed: {res.push.get('error')}")
        results.append(res)
    return results
