"""Pusher against the fake engine and the fake registry (its copier stands in for skopeo's copy by digest): the
digest written first and verified, then the tags; retries, auth, skip-if-unchanged, a registry refusing zstd."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from _push_fakes import D2, REG, add, fake_engine, fake_registry, make_image

from imagebuild.errors import UsageError
from imagebuild.models import Plan
from imagebuild.oci import RegistryAuth
from imagebuild.plan.tags import assign_aliases, references
from imagebuild.push import PushAuthError, Pusher, push_plan
from imagebuild.push.failures import Stopped
from imagebuild.push.skopeo import CopyError

ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"
GZIP_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def make_pusher(bad_auth=False, retries=3, compression="zstd", sign_pushed=None):
    reg = fake_registry(bad_auth)
    api = fake_engine(reg)
    sleeps: list[float] = []
    logs: list[str] = []
    auth = RegistryAuth(REG, "alice", "pw-secret-1", source="options")
    pusher = Pusher(api, auth, registry_client=reg, retries=retries, backoff=1.0, sleep=sleeps.append,
                    log=logs.append, compression=compression, copier=reg.copier(), sign_pushed=sign_pushed)
    return pusher, api, reg, sleeps, logs


def test_push_writes_the_digest_then_moves_every_tag_to_it():
    img = make_image(aliases=("2.9-cuda12.8-runtime",))
    order: list[str] = []
    pusher, api, reg, sleeps, _ = make_pusher(sign_pushed=lambda image, ref: order.append(f"sign {ref}") or {"by": "key"})
    add(api, img.tag)
    reg.calls.clear()
    rec = pusher.push_image(img, references(img))
    assert rec["status"] == "pushed", rec
    digest = rec["digest"]
    assert reg.sends == [(f"{REG}/pytorch", digest, "alice", "pw-secret-1")]  # one copy by digest, no tag in it
    assert rec["pushed"] == [img.tag, f"{REG}/pytorch:2.9-cuda12.8-runtime"]
    assert reg.tags[("pytorch", img.short_tag)] == digest == reg.tags[("pytorch", "2.9-cuda12.8-runtime")]
    assert order == [f"sign {REG}/pytorch@{digest}"] and rec["signed"] == {"by": "key"}
    assert [c for c in reg.calls if c.startswith("put")] == [f"put {img.short_tag}", "put 2.9-cuda12.8-runtime"]
    assert rec["layer_media_types"] == [ZSTD_LAYER] and rec["compression"] == "zstd"
    assert rec["layers_pushed"] == 1 and rec["bytes"] > 0 and sleeps == []


def test_gzip_on_request_writes_docker_media_types():
    img = make_image()
    pusher, api, reg, *_ = make_pusher(compression="gzip")
    add(api, img.tag)
    rec = pusher.push_image(img)
    assert rec["status"] == "pushed" and rec["layer_media_types"] == [GZIP_LAYER]


def test_registry_refusing_zstd_moves_no_tag_and_names_the_gzip_option():
    img = make_image(aliases=("2.9-cuda12.8-runtime",))
    pusher, api, reg, sleeps, _ = make_pusher()
    add(api, img.tag)
    reg.tags[("pytorch", img.short_tag)] = D2  # the previous image
    reg.refuse_zstd = True
    rec = pusher.push_image(img, references(img))
    assert rec["status"] == "failed"
    assert "refused OCI manifests with zstd layers" in rec["error"] and "--compression gzip" in rec["error"]
    assert "\n" not in rec["error"]
    assert reg.tags == {("pytorch", img.short_tag): D2}  # nothing moved, no new tag
    assert len(reg.sends) == 1 and sleeps == []  # not retried


def test_a_tag_moves_only_after_the_digest_is_served():
    img = make_image()
    signed: list[str] = []
    pusher, api, reg, *_ = make_pusher(sign_pushed=lambda image, ref: signed.append(ref) or {})
    add(api, img.tag)
    reg.serve_override = D2  # the registry serves another manifest for the digest written
    rec = pusher.push_image(img)
    assert rec["status"] == "failed" and "the registry serves " + D2 in rec["error"]
    assert ("pytorch", img.short_tag) not in reg.tags
    # what was signed is the digest of the bytes this push prepared (beside the upload), never what was served; the
    # error says a signature names a digest no tag names
    assert signed == [f"{REG}/pytorch@{rec['digest']}"] and rec["digest"] != D2
    assert "its signature and attestations were written" in rec["error"]


def test_the_signing_runs_beside_the_upload_and_the_tags_wait_for_both():
    """The signer starts once the image is prepared, before the copy sends a byte; the copy does not wait for it;
    the tags move only after both (the upload here waits until the signing has started, and the signing until the
    upload is done: run one after the other, either would time out)."""
    img = make_image(aliases=("2.9-cuda12.8-runtime",))
    events: list[str] = []
    signing_started, sent = threading.Event(), threading.Event()

    def sign(image, ref):
        events.append("sign started")
        signing_started.set()
        assert sent.wait(10), "the upload never ran beside the signing"
        events.append("signed")
        return {"by": "key"}

    pusher, api, reg, *_ = make_pusher(sign_pushed=sign)
    add(api, img.tag)
    send = pusher.copier.send

    def send_beside(*args, **kwargs):
        assert signing_started.wait(10), "the upload began before the signing"
        events.append("sent")
        send(*args, **kwargs)
        sent.set()

    pusher.copier.send = send_beside
    reg.calls.clear()
    pending = pusher.begin_image(img, references(img))
    rec = pending.finish()
    assert rec["status"] == "pushed" and rec["signed"] == {"by": "key"}, rec
    assert events == ["sign started", "sent", "signed"]
    assert [c for c in reg.calls if c.startswith("put")] == [f"put {img.short_tag}", "put 2.9-cuda12.8-runtime"]


def test_a_key_that_fails_its_check_stops_the_push_before_anything_is_written(monkeypatch):
    """`before_write` (the signing key's check) is waited for before the upload, the signature and any tag: its
    refusal is Stopped, raised out of push_plan, with nothing sent, signed or tagged."""
    img = make_image()
    reg = fake_registry()
    api = fake_engine(reg)
    add(api, img.tag)
    signed: list[str] = []
    order: list[str] = []

    def check():
        order.append("checked")
        raise UsageError("--sign-key cosign.key: wrong password")

    with pytest.raises(Stopped) as stopped, monkeypatch.context() as patch:
        patch.setattr("imagebuild.push.pusher.RegistryClient", lambda *a, **k: reg)
        push_plan(Plan("m.yaml", [img]), client=api, auth_for=lambda r: RegistryAuth(r, "alice", "pw-1234"),
                  require_tests=False, make_copier=lambda _store: reg.copier(),
                  sign_pushed=lambda image, ref: signed.append(ref) or {}, before_write=check)
    assert isinstance(stopped.value.cause, UsageError) and "wrong password" in str(stopped.value)
    assert order == ["checked"] and reg.sends == [] and signed == [] and reg.tags == {} and reg.manifests == {}


def test_the_key_check_is_waited_for_before_the_upload():
    img = make_image()
    reg = fake_registry()
    api = fake_engine(reg)
    add(api, img.tag)
    order: list[str] = []
    pusher = Pusher(api, RegistryAuth(REG, "alice", "pw", source="x"), registry_client=reg, copier=reg.copier(),
                    sign_pushed=lambda image, ref: order.append("sign") or {},
                    before_write=lambda: order.append("key checked"))
    send = pusher.copier.send
    pusher.copier.send = lambda *a, **k: order.append("send") or send(*a, **k)
    rec = pusher.push_image(img)
    assert rec["status"] == "pushed", rec
    # asked again before each write (it answers at once once it has): never a write before the first answer
    assert order[0] == "key checked" and order.count("send") == 1 and order.count("sign") == 1


def test_a_failing_signer_leaves_every_tag_where_it_was():
    img = make_image()

    def refuse(image, ref):
        raise CopyError(f"signing {ref} failed")

    pusher, api, reg, *_ = make_pusher(sign_pushed=refuse)
    add(api, img.tag)
    rec = pusher.push_image(img)
    assert rec["status"] == "failed" and "signing" in rec["error"] and reg.tags == {}


def test_transient_errors_retried_with_exponential_backoff():
    img = make_image()
    pusher, api, reg, sleeps, logs = make_pusher(retries=3)
    reg.send_errors = [CopyError("received unexpected HTTP status: 503 Service Unavailable"),
                       CopyError("Patch http://x/v2/x/blobs/uploads/u: read: connection reset by peer"),
                       CopyError("blob upload unknown")]
    add(api, img.tag)
    rec = pusher.push_image(img)
    assert rec["status"] == "pushed", rec
    assert rec["attempts"] == 4 and sleeps == [1.0, 2.0, 4.0]
    assert any("retry 1/3" in m for m in logs)


def test_transient_errors_give_up_after_bounded_attempts():
    img = make_image()
    pusher, api, reg, sleeps, _ = make_pusher(retries=2)
    reg.send_errors = [CopyError("received unexpected HTTP status: 502 Bad Gateway")] * 10
    add(api, img.tag)
    rec = pusher.push_image(img)
    assert rec["status"] == "failed" and "gave up after 3 attempts" in rec["error"]
    assert len(reg.sends) == 3 and reg.tags == {}


def test_fatal_copy_error_is_not_retried():
    img = make_image()
    pusher, api, reg, sleeps, _ = make_pusher()
    reg.send_errors = [CopyError("name unknown: repository name not known to registry")]
    add(api, img.tag)
    rec = pusher.push_image(img)
    assert rec["status"] == "failed" and "name unknown" in rec["error"] and len(reg.sends) == 1


def test_wrong_credentials_fail_before_any_push_and_are_not_retried():
    img = make_image()
    pusher, api, reg, sleeps, _ = make_pusher(bad_auth=True)
    add(api, img.tag)
    with pytest.raises(PushAuthError, match="unauthorized: authentication required"):
        pusher.push_image(img)
    assert reg.sends == [] and sleeps == [] and reg.auth_checks == 1


def test_denied_from_the_copy_is_an_auth_failure_without_retry():
    img = make_image()
    pusher, api, reg, sleeps, _ = make_pusher()
    reg.send_errors = [CopyError("denied: requested access to the resource is denied")]
    add(api, img.tag)
    with pytest.raises(PushAuthError, match="requested access to the resource is denied"):
        pusher.push_image(img)
    assert len(reg.sends) == 1 and sleeps == []


def test_unchanged_image_is_skipped():
    img = make_image()
    pusher, api, reg, *_ = make_pusher()
    add(api, img.tag)
    first = pusher.push_image(img)
    again = pusher.push_image(img)
    assert again["status"] == "unchanged" and again["digest"] == first["digest"]
    assert len(reg.sends) == 1


def test_tag_pointing_elsewhere_is_pushed_and_only_missing_blobs_count():
    img = make_image()
    pusher, api, reg, *_ = make_pusher()
    add(api, img.tag)
    first = pusher.push_image(img)
    reg.tags[("pytorch", img.short_tag)] = D2
    again = pusher.push_image(img)
    assert again["status"] == "pushed" and reg.tags[("pytorch", img.short_tag)] == first["digest"]
    assert again["bytes"] == 0 and again["layers_existing"] == 1  # the registry had every blob


def test_missing_local_image_is_reported():
    img = make_image()
    pusher, *_ = make_pusher()
    rec = pusher.push_image(img)
    assert rec["status"] == "failed" and "not built" in rec["error"]


def test_moving_alias_goes_to_newest_patch():
    """The plan decides who owns an alias (plan.tags.assign_aliases); push reads it (plan.tags.references)."""
    images = [make_image(torch) for torch in ("2.9.0", "2.9.1", "2.10.0")]
    owned = assign_aliases([img.variant for img in images], "runtime", REG)  # variant key -> alias reference
    old, new, newer_minor = (dataclasses.replace(img, aliases=tuple(a for k, a in owned.items() if k == img.variant.key))
                             for img in images)
    owners = {img.tag: references(img) for img in (old, new, newer_minor)}
    assert owners[old.tag] == [old.tag]
    assert owners[new.tag] == [new.tag, f"{REG}/pytorch:2.9-cuda12.8-runtime"]
    assert owners[newer_minor.tag][1].endswith(":2.10-cuda12.8-runtime")


def test_push_plan_gates_on_build_and_tests():
    base = make_image(flavor="base")
    rt = make_image(parent=base.tag)
    dev = make_image(flavor="dev", parent=rt.tag)
    plan = Plan("m.yaml", [base, rt, dev])
    reg = fake_registry()
    api = fake_engine(reg)
    for img in plan.images:
        add(api, img.tag)
    rows = {base.tag: {"status": "built", "tests": {"passed": 3, "failed": 0}},
            rt.tag: {"status": "built", "tests": {"passed": 2, "failed": 1}},
            dev.tag: {"status": "built"}}
    import imagebuild.push.pusher as pm

    orig = pm.RegistryClient
    pm.RegistryClient = lambda *a, **k: reg
    copiers = []

    def copier(store):
        copiers.append(reg.copier())
        return copiers[-1]

    try:
        results = push_plan(plan, client=api, auth_for=lambda r: RegistryAuth(r, "u", "pw-1234"),
                            report_rows=rows, sleep=lambda s: None, make_copier=copier)
        assert [r.push["status"] for r in results] == ["pushed", "skipped", "skipped"]
        assert "1 smoke test(s) failed" in results[1].push["reason"]
        assert "not tested" in results[2].push["reason"]
        results = push_plan(plan, client=api, auth_for=lambda r: RegistryAuth(r, "u", "pw-1234"),
                            report_rows=rows, require_tests=False, sleep=lambda s: None, make_copier=copier,
                            compression=lambda registry: "gzip")
        assert [r.push["status"] for r in results] == ["pushed", "pushed", "pushed"]  # gzip: another digest
        assert {r.push["compression"] for r in results} == {"gzip"}
        assert all(c.closed for c in copiers)  # every push's temporary folder is removed
    finally:
        pm.RegistryClient = orig


def test_push_plan_refuses_tags_without_registry():
    img = make_image(registry="")
    results = push_plan(Plan("m", [img]), client=None, auth_for=lambda r: None, require_tests=False)
    assert results[0].push["status"] == "skipped"
    assert "no registry" in results[0].push["reason"]


def test_push_plan_fails_a_tag_that_is_not_a_reference():
    img = make_image(registry="reg.io:99999")
    results = push_plan(Plan("m", [img]), client=None, auth_for=lambda r: None, require_tests=False)
    assert results[0].push["status"] == "failed"
    assert "port '99999'" in results[0].push["error"]


def test_a_recorded_push_still_served_is_unchanged_without_saving_or_compressing():
    img = make_image(aliases=("2.9-cuda12.8-runtime",))
    signed: list[str] = []
    pusher, api, reg, *_ = make_pusher(sign_pushed=lambda image, ref: signed.append(ref) or {"by": "key"})
    add(api, img.tag)
    first = pusher.push_image(img, references(img))
    copier = pusher.copier
    assert first["status"] == "pushed" and copier.prepared == ["sha256:img1"]
    again = pusher.push_image(img, references(img), known=first["digest"])
    assert again["status"] == "unchanged" and again["digest"] == first["digest"] and again["recorded"]
    assert copier.prepared == ["sha256:img1"]  # not saved or compressed again
    assert again["layer_media_types"] == [ZSTD_LAYER] and again["size"] == first["size"]
    assert signed == [f"{REG}/pytorch@{first['digest']}"] * 2  # a push with a key signs what its tags name
    # a tag moved since (another image pushed under it): the whole push again, that tag put back
    reg.tags[("pytorch", "2.9-cuda12.8-runtime")] = D2
    third = pusher.push_image(img, references(img), known=first["digest"])
    assert third["status"] == "pushed" and copier.prepared == ["sha256:img1"] * 2
    assert reg.tags[("pytorch", "2.9-cuda12.8-runtime")] == first["digest"]
    # a recorded digest the registry no longer has: pushed the whole way
    fourth = pusher.push_image(img, references(img), known="sha256:" + "9" * 64)
    assert fourth["status"] == "unchanged" and "recorded" not in fourth and len(copier.prepared) == 3
