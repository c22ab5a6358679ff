"""Pusher against a fake engine and a fake registry: stream errors, retries, auth, skip-if-unchanged, verify."""

from __future__ import annotations

import dataclasses

import pytest
from _push_fakes import D1, D2, REG, add, fake_engine, fake_registry, make_image, ok_stream

from imagebuild.models import Plan
from imagebuild.oci import RegistryAuth
from imagebuild.plan.tags import assign_aliases, references
from imagebuild.push import PushAuthError, Pusher, push_plan


def make_pusher(scripts=None, bad_auth=False, retries=3):
    reg = fake_registry(bad_auth)
    api = fake_engine(reg, scripts)
    sleeps: list[float] = []
    logs: list[str] = []
    auth = RegistryAuth(REG, "alice", "pw-secret-1", source="options")
    pusher = Pusher(api, auth, registry_client=reg, retries=retries, backoff=1.0,
                    sleep=sleeps.append, log=logs.append)
    return pusher, api, reg, sleeps, logs


def test_push_records_digest_bytes_and_aliases():
    img = make_image(aliases=("2.9-cuda12.8-runtime",))
    pusher, api, reg, sleeps, _ = make_pusher()
    add(api, img.tag)
    rec = pusher.push_image(img, references(img))
    assert rec["status"] == "pushed"
    assert rec["digest"] == D1
    assert rec["pushed"] == [img.tag, f"{REG}/pytorch:2.9-cuda12.8-runtime"]
    assert [c[1] for c in api.push_calls] == [img.tag.rsplit(":", 1)[1], "2.9-cuda12.8-runtime"]
    assert api.tag_calls == [("sha256:img1", f"{REG}/pytorch", "2.9-cuda12.8-runtime")]
    assert rec["bytes"] == 2000 and rec["layers_pushed"] == 2
    assert api.push_calls[0][2] == {"username": "alice", "password": "pw-secret-1", "serveraddress": REG}
    assert sleeps == []


def test_error_chunk_after_success_lines_fails_the_push():
    img = make_image()
    tag = img.short_tag
    bad = ok_stream(tag)[:-2] + [{"errorDetail": {"message": "manifest invalid: manifest invalid"},
                                  "error": "manifest invalid: manifest invalid"}]
    pusher, api, *_ = make_pusher([bad])
    add(api, img.tag)
    rec = pusher.push_image(img)
    assert rec["status"] == "failed"
    assert "manifest invalid" in rec["error"]
    assert len(api.push_calls) == 1  # fatal: no retry


def test_transient_errors_retried_with_exponential_backoff():
    img = make_image()
    e503 = [{"status": "Preparing", "id": "a"},
            {"error": "received unexpected HTTP status: 503 Service Unavailable",
             "errorDetail": {"message": "received unexpected HTTP status: 503 Service Unavailable"}}]
    reset = [{"error": "Put http://x/v2/…: read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"}]
    unknown = [{"error": "blob upload unknown"}]
    pusher, api, reg, sleeps, logs = make_pusher([e503, reset, unknown], retries=3)
    add(api, img.tag)
    rec = pusher.push_image(img)
    assert rec["status"] == "pushed", rec
    assert rec["attempts"] == 4
    assert sleeps == [1.0, 2.0, 4.0]
    assert any("retry 1/3" in m for m in logs)


def test_transient_errors_give_up_after_bounded_attempts():
    img = make_image()
    e = [{"error": "received unexpected HTTP status: 502 Bad Gateway"}]
    pusher, api, reg, sleeps, _ = make_pusher([e] * 10, retries=2)
    add(api, img.tag)
    rec = pusher.push_image(img)
    assert rec["status"] == "failed"
    assert "gave up after 3 attempts" in rec["error"]
    assert len(api.push_calls) == 3


def test_engine_timeout_is_transient():
    from imagebuild.engine.stream import EngineError

    img = make_image()  # the store's word for a read timeout (test_engine_store.py: the SDK's error becomes this)
    timeout = EngineError("engine connection: read timed out (timeout/EOF)", connection=True)
    pusher, api, reg, sleeps, logs = make_pusher([timeout])
    add(api, img.tag)
    assert pusher.push_image(img)["status"] == "pushed"
    assert len(api.push_calls) == 2 and sleeps == [1.0]
    assert "read timed out (timeout/EOF); retry 1/3 in 1.0s" in logs[0]


def test_wrong_credentials_fail_before_any_push_and_are_not_retried():
    img = make_image()
    pusher, api, reg, sleeps, _ = make_pusher(bad_auth=True)
    add(api, img.tag)
    with pytest.raises(PushAuthError, match="unauthorized: authentication required"):
        pusher.push_image(img)
    assert api.push_calls == [] and sleeps == [] and reg.auth_checks == 1


def test_denied_in_stream_is_an_auth_failure_without_retry():
    img = make_image()
    denied = [{"error": "denied: requested access to the resource is denied"}]
    pusher, api, reg, sleeps, _ = make_pusher([denied])
    add(api, img.tag)
    with pytest.raises(PushAuthError, match="requested access to the resource is denied"):
        pusher.push_image(img)
    assert len(api.push_calls) == 1 and sleeps == []


def test_unauthorized_from_engine_with_good_credentials_is_retried():
    """The engine reports 'unauthorized' when a 5xx ate its auth challenge; the credentials still check out."""
    img = make_image()
    unauth = [{"error": "unauthorized: authentication required"}]
    pusher, api, reg, sleeps, _ = make_pusher([unauth])
    add(api, img.tag)
    assert pusher.push_image(img)["status"] == "pushed"
    assert len(api.push_calls) == 2 and reg.auth_checks == 2


def test_unchanged_image_is_skipped():
    img = make_image()
    pusher, api, reg, *_ = make_pusher()
    add(api, img.tag, repo_digests=[f"{REG}/pytorch@{D1}"])
    reg.tags[("pytorch", img.short_tag)] = D1
    rec = pusher.push_image(img)
    assert rec["status"] == "unchanged" and rec["digest"] == D1 and api.push_calls == []


def test_tag_pointing_elsewhere_is_pushed():
    img = make_image()
    pusher, api, reg, *_ = make_pusher()
    add(api, img.tag, repo_digests=[f"{REG}/pytorch@{D1}", f"otherreg:5000/pytorch@{D2}"])
    reg.tags[("pytorch", img.short_tag)] = D2  # same digest, but our RepoDigest for it is another registry's
    pusher.store.push_scripts = [ok_stream(img.short_tag, D1)]
    assert pusher.push_image(img)["status"] == "pushed"


def test_digest_mismatch_after_push_fails():
    img = make_image()
    pusher, api, reg, *_ = make_pusher()
    add(api, img.tag)
    reg.serve_override = D2
    rec = pusher.push_image(img)
    assert rec["status"] == "failed"
    assert "registry serves" in rec["error"]


def test_stream_without_digest_is_a_failure():
    img = make_image()
    pusher, api, reg, *_ = make_pusher([[{"status": "Preparing", "id": "a"}]] * 5, retries=1)
    add(api, img.tag)
    rec = pusher.push_image(img)
    assert rec["status"] == "failed" and "without a digest" in rec["error"]


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
    try:
        results = push_plan(plan, client=api, auth_for=lambda r: RegistryAuth(r, "u", "pw-1234"),
                            report_rows=rows, sleep=lambda s: None)
        assert [r.push["status"] for r in results] == ["pushed", "skipped", "skipped"]
        assert "1 smoke test(s) failed" in results[1].push["reason"]
        assert "not tested" in results[2].push["reason"]
        results = push_plan(plan, client=api, auth_for=lambda r: RegistryAuth(r, "u", "pw-1234"),
                            report_rows=rows, require_tests=False, sleep=lambda s: None)
        assert [r.push["status"] for r in results] == ["unchanged", "pushed", "pushed"]
    finally:
        pm.RegistryClient = orig


def test_push_plan_refuses_tags_without_registry():
    img = make_image(registry="")
    results = push_plan(Plan("m", [img]), client=None, auth_for=lambda r: None, require_tests=False)
    assert results[0].push["status"] == "skipped"
    assert "no registry" in results[0].push["reason"]


def test_moving_alias_local_tag_on_previous_build_is_retagged():
    img = make_image(aliases=("2.9-cuda12.8-runtime",))
    pusher, api, reg, *_ = make_pusher()
    add(api, img.tag, image_id="sha256:new")
    add(api, f"{REG}/pytorch:2.9-cuda12.8-runtime", image_id="sha256:old")
    rec = pusher.push_image(img, references(img))
    assert rec["status"] == "pushed"
    assert api.tag_calls == [("sha256:new", f"{REG}/pytorch", "2.9-cuda12.8-runtime")]


def test_push_plan_fails_a_tag_that_is_not_a_reference():
    img = make_image(registry="reg.io:99999")
    results = push_plan(Plan("m", [img]), client=None, auth_for=lambda r: None, require_tests=False)
    assert results[0].push["status"] == "failed"
    assert "port '99999'" in results[0].push["error"]
