"""The push step: planned images pushed by image ID; `build --push` and `push --matrix` share it.

"Tested" is read from the run's record by content (image ID + suite version + the plan's expectations), so
`push --registry OTHER` right after `build --test` pushes without rebuilding or retesting: the image is tagged for
OTHER from its ID, pushed, and the digest is recorded per repository."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from imagebuild.engine.store import as_store
from imagebuild.models import ImagePlan, ImageResult, Plan
from imagebuild.oci import Reference, ReferenceSyntaxError, RegistryAuth, resolve_auth
from imagebuild.pipeline.layers import check_layer_limits
from imagebuild.pipeline.loaded import RecordBook, Say
from imagebuild.pipeline.located import Located
from imagebuild.pipeline.settings import PushSettings
from imagebuild.pipeline.signing import KeyCheck, signer
from imagebuild.push import DEFAULT_COMPRESSION, DEFAULT_RETRIES, gate, push_plan
from imagebuild.push.failures import Stopped
from imagebuild.record import Record
from imagebuild.record.testkeys import failed_result, tested_ok
from imagebuild.record.update import record_push
from imagebuild.secrets import redact
from imagebuild.smoke import runner


class PushStatus(str, Enum):
    """ImageResult.push["status"] as push/ writes it."""

    PUSHED = "pushed"
    UNCHANGED = "unchanged"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class GateRow:
    """What push's gate reads of one image: is it here, and the record's test result for this content."""

    here: Located
    tests: dict[str, Any] | None = None

    def for_push(self) -> dict[str, Any]:
        """The build-report row form push.gate reads."""
        if self.here.image_id is None:
            return {"status": "not-built", "error": self.here.why or None}
        return {"status": "built", "image_id": self.here.image_id, "tests": self.tests}


@dataclass
class PushRun:
    results: list[ImageResult]  # one per image asked, `push` filled
    gate: dict[str, GateRow] = field(default_factory=dict)  # tag -> what the gate read (the record's test result)

    @property
    def failed(self) -> int:
        return sum(1 for r in self.results if (r.push or {}).get("status") == PushStatus.FAILED)

    @property
    def not_pushed(self) -> int:
        return sum(1 for r in self.results if (r.push or {}).get("status") in (PushStatus.FAILED, PushStatus.SKIPPED))


def gate_rows(images: list[tuple[ImagePlan, Located]], rec: Record | None) -> dict[str, GateRow]:
    """tag -> the row push's gate reads: built or not, and the record's test result for this content."""
    suite = runner.suite_version()
    rows: dict[str, GateRow] = {}
    for img, here in images:
        if here.image_id is None:
            rows[img.tag] = GateRow(here)
            continue
        expect = runner.expectations_for(img)
        hit = tested_ok(rec, here.image_id, suite, expect) or failed_result(rec, here.image_id, suite, expect)
        rows[img.tag] = GateRow(here, hit)
    return rows


def gate_reason(img: ImagePlan, row: GateRow, require_tests: bool) -> str | None:
    """Why `img` would not be pushed (None: it would): push's own gate."""
    return gate(img, row.for_push(), require_tests)


def auth_cache(settings: PushSettings, say: Say, describe: bool) -> Callable[[str], RegistryAuth]:
    """Credentials per registry, resolved once each (--username/--password-stdin, env, docker login); `describe`
    (`push`): say once per registry where they came from, never the secret."""
    auths: dict[str, RegistryAuth] = {}

    def auth_for(registry: str) -> RegistryAuth:
        if registry not in auths:
            auths[registry] = resolve_auth(registry, username=settings.username, password=settings.password)
            if describe:
                say(f"push: credentials {auths[registry].describe()}")
        return auths[registry]

    return auth_for


def compression_for(registry: str, settings: PushSettings, plan: Plan) -> str:
    """zstd | gzip for pushes to `registry`: --compression, else the matrix's `compression` for that registry (or
    for every registry), else zstd."""
    if settings.compression:
        return settings.compression
    chosen = plan.images[0].variant.compression if plan.images else {}
    return chosen.get(registry) or chosen.get("*") or DEFAULT_COMPRESSION


def recorded_pushes(book: RecordBook, images: list[tuple[ImagePlan, Located]],
                    compression: Callable[[str], str]) -> dict[str, str]:
    """tag -> the digest the record says exactly this image (its ID now) was pushed as to the tag's repository
    with the compression this push uses: the pusher's chance to find it unchanged without compressing it again."""
    known: dict[str, str] = {}
    for img, here in images:
        entry = book.record.images.get(img.id) if book.record is not None and here.image_id else None
        push = (entry.pushes.get(img.repository) if entry is not None else None) or {}
        digest = push.get("digest")
        try:
            registry = Reference.parse(img.tag).registry
        except ReferenceSyntaxError:
            continue
        if (digest and push.get("image_id") == here.image_id and push.get("status") in ("pushed", "unchanged")
                and push.get("compression") == compression(registry)):
            known[img.tag] = str(digest)
    return known


def push_step(client: Any, plan: Plan, images: list[tuple[ImagePlan, Located]], book: RecordBook,
              settings: PushSettings, log: Say, *, describe_credentials: bool = False) -> PushRun:
    key_check = KeyCheck.start(settings, [img for img, _ in images])  # opened while the push prepares
    rows = gate_rows(images, book.record)
    store = as_store(client)
    check_layer_limits(store, images, settings.layer_limit)  # before anything is tagged or pushed
    for img, here in images:  # the plan's tag (this registry) points at the image the record holds
        if here.image_id:
            ref = Reference.parse(img.tag)
            store.tag(here.image_id, ref.name, ref.tag or "latest", force=True)
    auth_for = auth_cache(settings, log, describe_credentials)
    located = {img.tag: here.image_id for img, here in images}
    sign_pushed = sign_index = vouch = None
    if key_check is not None:
        log(f"push: signing with {key_check.key.describe()} (cosign {key_check.cosign_version()}, key-based, no "
            "transparency log)")
        sign_pushed, sign_index, vouch = signer(client, plan, book, settings, key_check.key, key_check.public,
                                                {t: i for t, i in located.items() if i}, auth_for, log)

    def compression(registry: str) -> str:
        return compression_for(registry, settings, plan)

    try:
        pushed = push_plan(plan, client=client, auth_for=auth_for, images=[img for img, _ in images],
                           known=recorded_pushes(book, images, compression), compression=compression,
                           report_rows={tag: row.for_push() for tag, row in rows.items()},
                           require_tests=settings.require_tests, log=lambda m: log(redact(m)),
                           ca_file=settings.ca_file,
                           retries=DEFAULT_RETRIES if settings.retries is None else settings.retries,
                           sign_pushed=sign_pushed, sign_index=sign_index, vouch=vouch,
                           before_write=key_check.public if key_check is not None else None)
    except Stopped as exc:  # the key refused before anything was written
        raise exc.cause from None
    if key_check is not None:
        key_check.public()  # a run that wrote nothing still says a key that cannot sign
    book.update(lambda rec: record_push(rec, plan, pushed, {t: i for t, i in located.items() if i}))
    for res in pushed:
        p = res.push or {}
        res.image_id = located.get(res.tag)
        line = f"{p.get('status', '?'):>9}  {res.tag}  {p.get('digest') or ''}" + ("  signed" if p.get("signed") else "")
        if (p.get("index") or {}).get("digest"):
            idx = p["index"]
            line += f"  index {idx['digest']} ({', '.join(idx.get('platforms') or {})}: {idx.get('status')})"
        if p.get("status") in (PushStatus.FAILED, PushStatus.SKIPPED):
            line += f"  ({p.get('error') or p.get('reason')})"
        log(redact(line))
    return PushRun(pushed, rows)

