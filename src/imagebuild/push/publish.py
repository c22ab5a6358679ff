"""Push a plan's selected images (push/pusher.py, one image at a time) and publish one OCI index per image planned for
several platforms (push/index.py), after every platform image of it is in the registry.

Which images may be pushed (`gate`): built, and tested unless --untested. An index is written by digest, checked,
signed when the run signs, and only then are the plain tag and its aliases pointed at it; anything short of that
(a platform image that failed or was skipped, a member the registry does not serve, a registry that refuses an OCI
index) is one `error:` line and no tag moved.

Sign only what was checked: before an index is written (let alone signed), every member must be the platform it is
listed as (its image config's os/architecture/variant, read from the registry by digest: oci/platform.py), and,
when the run signs, either pushed (and signed) in this run or already signed and attested by the signing key
(`vouch`: cosign against the key's public half, by digest). A member that another run or anyone else left under a
platform's tag (`push --only` of one platform) is otherwise one `error:` line: nothing written, signed or moved.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from imagebuild.engine.store import ImageStore, as_store
from imagebuild.errors import ImagebuildError
from imagebuild.hints import has_option
from imagebuild.models import DEFAULT_PLATFORM, ImagePlan, ImageResult, Plan
from imagebuild.oci import Reference, ReferenceSyntaxError, RegistryAuth, RegistryAuthError, RegistryError
from imagebuild.oci.answers import index_entries, is_index, parse_object
from imagebuild.oci.platform import platform_mismatch
from imagebuild.plan.tags import references
from imagebuild.push.compress import OCI_MANIFEST
from imagebuild.push.failures import PushAuthError, PushError, Stopped
from imagebuild.push.index import (
    INDEX_MEDIA_TYPE,
    IndexGroup,
    Member,
    held_tags,
    index_digest,
    index_document,
    index_groups,
)
from imagebuild.push.pusher import (
    DEFAULT_RETRIES,
    Copier,
    PendingPush,
    Pusher,
    SignIndex,
    SignPushed,
)
from imagebuild.push.skopeo import DEFAULT_COMPRESSION
from imagebuild.secrets import redact
from imagebuild.smokeresult import SmokeResult

if TYPE_CHECKING:
    from imagebuild.engine.store import EngineClient

# REPO@DIGEST of an index member this run did not push: returns when the signing key vouches for it (signed and
# attested by that key, for that digest), raises ImagebuildError saying why not
Vouch = Callable[[str], None]


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
        return "not tested (run `imagebuild test` first" + (", or push with --untested)" if has_option("--untested")
                                                             else ")")
    result = SmokeResult.from_json(tests, f"the test result of {(row or {}).get('tag') or 'the image'}")
    if result.failed:
        return f"{result.failed} smoke test(s) failed"
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
    compression: Callable[[str], str] = lambda _registry: DEFAULT_COMPRESSION,
    make_copier: Callable[[ImageStore], Copier] | None = None,
    sign_pushed: SignPushed | None = None,
    sign_index: SignIndex | None = None,
    known: dict[str, str] | None = None,
    vouch: Vouch | None = None,
    before_write: Callable[[], object] | None = None,
) -> list[ImageResult]:
    """Push the selected images of `plan` (default: all) that were built (and tested, unless require_tests=False).

    Returns one ImageResult per selected image with `push` filled: status pushed | unchanged | failed | skipped
    (+ "reason"). Raises PushAuthError (exit 1) when a registry refuses the credentials. `sign_pushed(image,
    "REPO@DIGEST")` runs once the digest is written and verified, before any tag of it moves (a refusal fails that
    image and leaves its tags where they were). `known`: tag -> the digest the record says that very image was
    pushed as with this compression (Pusher.push_image: unchanged without a save and a compression). `vouch`:
    the signing key's check of an index member this run did not push (see the module docstring). `before_write`:
    waited for before anything is written (push/pusher.py); its refusal is raised as `Stopped`, nothing written."""
    selected = images if images is not None else plan.images
    rows = report_rows or {}
    results: list[ImageResult] = []
    pushers: dict[str, Pusher] = {}
    chosen = {i.tag for i in selected}
    # indexes over the whole plan: pushing one platform (--only) re-publishes its index with the others' images as
    # the registry holds them, never a single-platform manifest under the plain tag
    groups = [g for g in index_groups(plan.images) if any(m.tag in chosen for m in g.images)]
    held = held_tags(groups)
    waiting: tuple[ImageResult, PendingPush] | None = None

    def finish() -> None:
        """The image before: its signature waited for, its tags moved, its record filled."""
        nonlocal waiting
        if waiting is not None:
            res, pending = waiting
            waiting = None
            res.push = pending.finish()
            if res.push["status"] == "failed":
                log(f"error: {res.tag}: push failed: {res.push.get('error')}")

    try:
        for image in selected:
            res = result_for(image)
            refs = references(image)
            reason = gate(image, rows.get(image.tag), require_tests)
            registry = None
            if reason is None:
                try:
                    registry = _push_registry(image.tag)
                except ReferenceSyntaxError as exc:
                    log(f"error: {image.tag}: push failed: {exc}")
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
                store = as_store(client)
                pushers[registry] = Pusher(store, auth_for(registry), retries=retries, log=log, ca_file=ca_file,
                                           sleep=sleep, compression=compression(registry),
                                           copier=make_copier(store) if make_copier else None,
                                           sign_pushed=sign_pushed, before_write=before_write)
            # this image is written while the one before is signed; that one's tags move once it is (finish)
            pending = pushers[registry].begin_image(image, refs, hold=image.tag in held,
                                                    known=(known or {}).get(image.tag))
            finish()
            waiting = (res, pending)
            results.append(res)
        finish()
        for group in groups:
            _publish(group, {r.tag: r for r in results}, pushers, log, sign_index, vouch)
    except PushAuthError:  # the next image's registry refused: the one already written still gets its tags
        if waiting is not None:
            with contextlib.suppress(PushAuthError):
                finish()
        raise
    finally:
        for pusher in pushers.values():
            pusher.close()
    return results


def _publish(group: IndexGroup, results: dict[str, ImageResult], pushers: dict[str, Pusher],
             log: Callable[[str], None], sign_index: SignIndex | None, vouch: Vouch | None) -> None:
    """The group's index, once every platform image of it is in the registry; its record on the carrier's result
    (a failed index fails the carrier's push: its references name nothing new)."""
    carrier = results.get(group.carrier.tag) or next(results[m.tag] for m in group.images if m.tag in results)
    registry = _push_registry(group.refs[0])
    pusher = pushers.get(registry or "")
    if pusher is None:  # no image of the group went to a registry (each one's row says why)
        return
    problems = []
    members = []
    for image in group.images:
        if image.tag not in results:  # not selected in this run: as the registry holds it under its own tag
            held = _registry_member(pusher, image)
            if held is None:
                problems.append(f"the {image.variant.platform} image {image.short_tag} is neither selected nor in "
                                "the registry")
            else:
                members.append(held)
            continue
        push = results[image.tag].push or {}
        if push.get("status") not in ("pushed", "unchanged") or not push.get("digest"):
            problems.append(f"the {image.variant.platform} image {image.short_tag} was "
                            f"{push.get('status', 'not pushed')}")
            continue
        members.append(Member(image.variant.platform, str(push["digest"]), int(push.get("size") or 0),
                              str(push.get("media_type") or OCI_MANIFEST)))
    if problems:
        rec: dict[str, Any] = {"status": "failed", "tags": list(group.refs),
                               "error": f"{group.refs[0]}: no index published ({'; '.join(problems)}); no tag was "
                                        "moved"}
    else:
        rec = publish_index(pusher, list(group.refs), members, sign_index, vouch)
    carrier.push = {**(carrier.push or {}), "index": rec}
    if rec["status"] == "failed":
        log(f"error: {group.refs[0]}: index not published: {rec.get('error')}")
        carrier.push["status"] = "failed"
        carrier.push.setdefault("error", rec.get("error"))
    else:
        log(f"{group.refs[0]}: index {rec['digest'][:19]} of {', '.join(rec['platforms'])}: {rec['status']}")


def _registry_member(pusher: Pusher, image: ImagePlan) -> Member | None:
    """`image` as the registry holds it now: another platform's under its own tag; the default platform's (whose
    tag is the index's) as the entry for its platform in the index its tag names, or the manifest its tag names
    when that is no index yet. None when the registry has neither (or answers something that is neither)."""
    ref = pusher.parse(image.tag)
    try:
        body, media_type, digest = pusher.registry.manifest_raw(ref.repository, str(ref.tag))
        doc = parse_object(body, str(ref))
        if not is_index(doc, media_type):
            return Member(image.variant.platform, digest, len(body), media_type, here=False)
        if image.variant.platform != DEFAULT_PLATFORM:
            return None  # its own tag names an index: not what push writes for one platform
        entries = index_entries(doc, str(ref))
    except RegistryAuthError as exc:
        raise PushAuthError(str(exc)) from exc
    except RegistryError:
        return None
    return next((Member(image.variant.platform, e.digest, e.size, e.media_type, here=False) for e in entries
                 if e.platform_name == image.variant.platform), None)


def _check_members(pusher: Pusher, name: str, repo_path: str, members: list[Member], vouch: Vouch | None) -> None:
    """Every member served by digest, of the platform it is listed as, and (`vouch`: the run signs) pushed in this
    run or vouched for by the signing key; PushError naming the first that is not."""
    for m in members:
        ref = f"{name}@{m.digest}"
        if pusher.served(repo_path, m.digest) != m.digest:
            raise PushError(f"{name}: the {m.platform} image {m.digest} is not in the repository: the index would "
                            "name a manifest nobody can pull")
        try:
            why = platform_mismatch(pusher.registry, repo_path, m.digest, m.platform, ref)
        except RegistryAuthError as exc:
            raise PushAuthError(str(exc)) from exc
        except RegistryError as exc:
            raise PushError(f"{ref}: its platform cannot be read, so it is not listed as {m.platform} "
                            f"({redact(str(exc))})") from None
        if why:
            raise PushError(f"{ref} is not the {m.platform} image the index would list it as: {why}")
        if vouch is not None and not m.here:
            try:
                vouch(ref)
            except PushAuthError:
                raise
            except ImagebuildError as exc:
                raise PushError(f"{ref}, the {m.platform} image the registry holds, was not pushed in this run and "
                                f"is not signed by the signing key ({redact(str(exc))}); push that platform in this "
                                "run too, or sign it with this key first") from None


def publish_index(pusher: Pusher, refs: list[str], members: list[Member],
                  sign_index: SignIndex | None = None, vouch: Vouch | None = None) -> dict[str, Any]:
    """The OCI index of `members` (each already written by digest in the references' repository) checked
    (`_check_members`: `vouch` only when the run signs), written by digest, signed (`sign_index`), then `refs`
    pointed at it. The index's push record; status "failed" with nothing written, signed or tagged for anything
    that went wrong (PushAuthError raised on refused credentials)."""
    body = index_document(members)
    digest = index_digest(body)
    started = time.monotonic()
    rec: dict[str, Any] = {"status": "failed", "registry": pusher.auth.registry, "digest": digest,
                           "media_type": INDEX_MEDIA_TYPE, "tags": list(refs), "pushed": [], "unchanged": [],
                           "platforms": {m.platform: m.digest for m in members}, "seconds": 0.0}
    try:
        repositories = pusher.by_repository(refs)
        for name, tags in repositories.items():  # every member of every repository checked before anything is written
            pusher.check_auth(tags[0].repository)
            _check_members(pusher, name, tags[0].repository, members, vouch if sign_index is not None else None)
        for name, tags in repositories.items():
            repo_path = tags[0].repository
            if pusher.served(repo_path, digest) != digest:
                pusher.may_write()
                try:
                    pusher.registry.put_manifest(repo_path, digest, body, INDEX_MEDIA_TYPE)
                except RegistryAuthError as exc:
                    raise PushAuthError(str(exc)) from exc
                except RegistryError as exc:
                    raise PushError(f"{name}: the registry refused the OCI image index of "
                                    f"{', '.join(m.platform for m in members)} ({redact(str(exc))}); no tag was "
                                    "moved (push one platform per tag with --only, or use a registry that takes "
                                    "OCI image indexes)") from None
                served = pusher.served(repo_path, digest)
                if served != digest:
                    raise PushError(f"{name}@{digest}: index written, but the registry serves "
                                    f"{served or 'nothing'} for that digest")
                pusher.log(f"{name}@{digest}: index written ({', '.join(m.platform for m in members)})")
            if sign_index is not None and "signed" not in rec:
                try:
                    rec["signed"] = sign_index(f"{name}@{digest}")
                except ImagebuildError as exc:
                    raise PushError(f"{redact(str(exc))}; no tag was moved to the unsigned index {digest}") \
                        from None
            todo = [t for t in tags if pusher.served(repo_path, str(t.tag)) != digest]
            rec["unchanged"] += [str(t) for t in tags if t not in todo]
            pusher.point_tags(repo_path, todo, digest, body, INDEX_MEDIA_TYPE)
            rec["pushed"] += [str(t) for t in todo]
        rec["status"] = "pushed" if rec["pushed"] else "unchanged"
    except (PushAuthError, Stopped):
        raise
    except ImagebuildError as exc:
        rec["error"] = redact(str(exc))
    rec["seconds"] = round(time.monotonic() - started, 2)
    return rec
