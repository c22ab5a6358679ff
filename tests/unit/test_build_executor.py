"""Executor logic against a fake engine: order, parents once, BASE_IMAGE = parent ID, up to date, --only,
--keep-going, disk check, proxies and secrets."""

from __future__ import annotations

import pytest
from _fake_engine import FakeEngine
from _support import chain, plan_of

from imagebuild.builder.disk import DiskSpaceError, check_disk, estimate_bytes
from imagebuild.builder.executor import build_plan
from imagebuild.builder.options import BuildOptions
from imagebuild.builder.order import order_images, select_images
from imagebuild.builder.progress import Progress
from imagebuild.builder.uptodate import BASE_LABEL, INPUTS_LABEL
from imagebuild.errors import UsageError

BASE_REF = "example/os:1@sha256:" + "0" * 64


@pytest.fixture
def client():
    c = FakeEngine()
    c.add_image(BASE_REF, {})
    return c


def run(client, plan, tmp_path, **kw):
    opts = BuildOptions(log_dir=tmp_path / "logs", check_disk=False, revision="abc", created="2026-01-01T00:00:00Z",
                        proxies={}, **kw)
    return build_plan(client, plan, opts, Progress())


def by_tag(results):
    return {r.tag: r for r in results}


def test_order_and_unknown_parent_and_cycle():
    a = chain("a")
    b = chain("b")
    shuffled = [a[2], b[1], a[0], b[0], a[1], b[2]]
    ordered = [i.tag for i in order_images(shuffled)]
    for c in (a, b):
        assert ordered.index(c[0].tag) < ordered.index(c[1].tag) < ordered.index(c[2].tag)
    with pytest.raises(UsageError, match="not in the plan"):
        order_images([a[1]])
    with pytest.raises(UsageError, match="more than once"):
        order_images([a[0], a[0]])


def test_select_only_brings_parents_along():
    a, b = chain("a"), chain("b")
    plan = plan_of(a, b)
    images, chosen = select_images(plan, ("*b-dev",))
    assert [i.tag for i in images] == [i.tag for i in b]
    assert chosen == {b[2].tag}
    images, _ = select_images(plan, ("a-runtime",))  # by id
    assert [i.id for i in images] == ["a-base", "a-runtime"]
    with pytest.raises(UsageError, match="matches no image"):
        select_images(plan, ("nothing*",))


def test_builds_in_order_children_from_parent_id(client, tmp_path):
    a = chain("a")
    results = run(client, plan_of(a), tmp_path)
    assert [r.status for r in results] == ["built"] * 3
    builds = {b["tag"]: b for b in client.builds}
    assert builds[a[0].tag]["buildargs"]["BASE_IMAGE"] == client.tags[BASE_REF]
    assert builds[a[1].tag]["buildargs"]["BASE_IMAGE"] == by_tag(results)[a[0].tag].image_id
    assert builds[a[2].tag]["buildargs"]["BASE_IMAGE"] == by_tag(results)[a[1].tag].image_id
    for img in a:
        b = builds[img.tag]
        assert b["labels"][INPUTS_LABEL] == img.inputs_hash
        assert b["labels"]["io.imagebuild.flavor"] == img.flavor
        assert b["buildargs"]["CREATED"] == "2026-01-01T00:00:00Z" and b["buildargs"]["REVISION"] == "abc"
        assert b["network"] == "host"  # rm, forcerm, no pull: the docker store's request (test_engine_store.py)
    r = by_tag(results)[a[2].tag]
    assert r.size == 1000 and r.layers[0] == {"size": 700, "created_by": "/bin/sh -c big"} and len(r.layers) == 2
    assert r.versions["torch"] == "2.13.0" and r.parent == a[1].tag
    assert r.log_path and (tmp_path / "logs" / "a-dev.log").is_file()


def test_second_run_is_all_up_to_date_and_force_rebuilds(client, tmp_path):
    plan = plan_of(chain("a"), chain("b"))
    run(client, plan, tmp_path)
    n = len(client.builds)
    again = run(client, plan, tmp_path)
    assert [r.status for r in again] == ["up-to-date"] * 6
    assert len(client.builds) == n
    assert all(r.image_id and r.size for r in again)
    forced = run(client, plan, tmp_path, force=True)
    assert [r.status for r in forced] == ["built"] * 6
    assert len(client.builds) == 2 * n


def test_up_to_date_needs_the_layers_of_the_same_base(client, tmp_path):
    a = chain("a")
    run(client, plan_of(a), tmp_path)
    # the base was rebuilt elsewhere with the same inputs on the same OS image: new layers, so the children are stale
    os_layers = client.inspect(BASE_REF)["RootFS"]["Layers"]
    new_base = client.add_image(a[0].tag, {INPUTS_LABEL: a[0].inputs_hash, BASE_LABEL: client.tags[BASE_REF]},
                                RootFS={"Layers": [*os_layers, "sha256:" + "e" * 64]})
    results = run(client, plan_of(a), tmp_path)
    assert [r.status for r in results] == ["up-to-date", "built", "built"]
    assert client.builds[-2]["buildargs"]["BASE_IMAGE"] == new_base


def test_same_hash_under_another_tag_counts_as_up_to_date(client, tmp_path):
    a = chain("a")
    run(client, plan_of(a), tmp_path)
    base_id = client.tags[a[0].tag]
    client.tags["renamed/repo:a-base"] = base_id  # the same finished image, known under another tag only
    del client.tags[a[0].tag]
    results = run(client, plan_of(a), tmp_path)
    assert results[0].status == "up-to-date" and client.tags[a[0].tag] == base_id


def test_untagged_image_with_same_labels_is_not_adopted(client, tmp_path):
    """A child's builder stage inherits its parent's labels; an untagged image must never be taken for the parent."""
    a = chain("a")
    run(client, plan_of(a), tmp_path)
    del client.tags[a[0].tag]
    for alias in [t for t, i in client.tags.items() if t.endswith("base")]:
        del client.tags[alias]
    results = run(client, plan_of(a), tmp_path)
    assert results[0].status == "built"


def test_only_builds_selected_and_parents(client, tmp_path):
    a, b = chain("a"), chain("b")
    results = by_tag(run(client, plan_of(a, b), tmp_path, only=("b-runtime",)))
    assert {t for t, r in results.items() if r.status == "built"} == {b[0].tag, b[1].tag}
    assert {t for t, r in results.items() if r.status == "skipped"} == {a[0].tag, a[1].tag, a[2].tag, b[2].tag}


def test_failure_stops_new_work_without_keep_going(client, tmp_path):
    a = chain("a", dockerfiles={"runtime": "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN echo x\nRUN false\nRUN echo y\n"})
    b = chain("b")
    results = by_tag(run(client, plan_of(a, b), tmp_path, jobs=1))
    ra = results[a[1].tag]
    assert ra.status == "failed"
    assert ra.error.startswith("Step 4/5 : RUN false: ") and "non-zero code: 1" in ra.error
    assert "output of RUN false" in (tmp_path / "logs" / "a-runtime.log").read_text()
    assert results[a[2].tag].status == "not-built" and a[1].tag in results[a[2].tag].error
    # jobs=1, plan order a-base, a-runtime, ...: b was not started after the failure
    assert any(results[i.tag].status == "not-built" for i in b)


def test_keep_going_finishes_independent_images(client, tmp_path):
    a = chain("a", dockerfiles={"runtime": "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN false\n"})
    b = chain("b")
    results = by_tag(run(client, plan_of(a, b), tmp_path, keep_going=True))
    assert [results[i.tag].status for i in a] == ["built", "failed", "not-built"]
    assert [results[i.tag].status for i in b] == ["built", "built", "built"]


def test_independent_images_build_in_parallel(client, tmp_path):
    import time

    orig = client._stream

    def slow(steps, tag, labels, parent=None):
        for chunk in orig(steps, tag, labels, parent):
            time.sleep(0.02)
            yield chunk

    client._stream = slow
    run(client, plan_of(chain("a"), chain("b"), chain("c")), tmp_path, jobs=3)
    assert client.max_active >= 2


def test_identical_inputs_build_once(client, tmp_path):
    a = chain("a", flavors=("base",))
    twin = chain("a", flavors=("base",), repo="other")
    results = run(client, plan_of(a, twin), tmp_path, jobs=2)
    assert sorted(r.status for r in results) == ["built", "up-to-date"]
    assert len(client.builds) == 1
    assert results[0].image_id == results[1].image_id


def test_proxies_and_secret_args_are_build_args_but_not_logged(client, tmp_path):
    a = chain("a", flavors=("base",))
    a[0].secret_build_args["PIP_INDEX_URL"] = "https://u:tok3n-xyz@pypi.corp/simple"
    a[0].dockerfile += "RUN echo https://u:tok3n-xyz@pypi.corp/simple\n"
    opts = BuildOptions(log_dir=tmp_path / "logs", check_disk=False,
                        proxies={"HTTP_PROXY": "http://p:proxypass1@proxy:3128", "no_proxy": "localhost"})
    build_plan(client, plan_of(a), opts, Progress())
    args = client.builds[0]["buildargs"]
    assert args["HTTP_PROXY"] == "http://p:proxypass1@proxy:3128" and args["no_proxy"] == "localhost"
    assert args["PIP_INDEX_URL"].startswith("https://u:tok3n-xyz@")
    assert "HTTP_PROXY" not in client.builds[0]["labels"]
    log = (tmp_path / "logs" / "a-base.log").read_text()
    assert "tok3n-xyz" not in log and "proxypass1" not in log


def test_proxy_build_args_from_environment():
    from imagebuild.builder.buildargs import proxy_build_args

    env = {"HTTPS_PROXY": "http://proxy:3128", "no_proxy": "localhost,127.0.0.1", "PATH": "/bin"}
    assert proxy_build_args(env) == {"HTTPS_PROXY": "http://proxy:3128", "no_proxy": "localhost,127.0.0.1"}


def test_disk_check_refuses_with_clear_message(client):
    a = chain("a")
    need = estimate_bytes(a)
    with pytest.raises(DiskSpaceError, match=r"has 1\.0 GB free.*needs about") as exc:
        check_disk(client, a, 1, free_bytes=10**9, root="/var/lib/docker")
    assert "/var/lib/docker" in str(exc.value) and "--only" in str(exc.value)
    assert check_disk(client, a, 0, free_bytes=need + 10 * 10**9) is None
    assert "not on this machine" in check_disk(client, a, 0)  # fake engine: data-root not local


def test_cuda_estimate_is_bigger():
    from _support import image, variant

    cpu = image("c", "runtime", None, var=variant("c"))
    cuda = image("g", "runtime", None, var=variant("g", cuda="12.8"))
    assert estimate_bytes([cuda]) > 4 * estimate_bytes([cpu])


def test_interrupt_removes_tracked_containers(client, tmp_path):
    import threading

    from imagebuild.builder.interrupt import interrupt
    from imagebuild.builder.state import RunState

    a = chain("a", flavors=("base",))
    r = RunState(client, plan_of(a), BuildOptions(log_dir=tmp_path, check_disk=False, proxies={}), Progress())
    r.backend.containers.update({"aaa111bbb222", "ccc333ddd444"})
    interrupt(r)
    assert r.cancel.is_set() and sorted(client.removed) == ["aaa111bbb222", "ccc333ddd444"]
    assert isinstance(r.cancel, threading.Event)


def test_one_bootstrap_for_variants_sharing_an_os(client, tmp_path, monkeypatch):
    from _support import image, variant

    from imagebuild.builder import bootstrap
    from imagebuild.models import BaseSource, Plan

    calls = []

    def fake_ensure(cl, spec, **kw):
        calls.append(spec.hash())
        iid = cl.add_image(spec.tag, {bootstrap.HASH_LABEL: spec.hash()})
        return bootstrap.BootstrapResult(iid, spec.tag, reused=False, tool="fake")

    monkeypatch.setattr(bootstrap, "ensure_bootstrap", fake_ensure)
    boot = BaseSource(kind="bootstrap")
    a = image("a", "base", None, var=variant("a", base=boot))
    b = image("b", "base", None, var=variant("b", base=boot))
    c = image("c", "base", None, var=variant("c", base=BaseSource(kind="bootstrap", packages=("curl",))))
    results = build_plan(client, Plan("t", [a, b, c]), BuildOptions(log_dir=tmp_path, check_disk=False, proxies={},
                                                                     jobs=3), Progress())
    assert [r.status for r in results] == ["built"] * 3
    assert len(calls) == 2 and len(set(calls)) == 2
    args = {x["tag"]: x["buildargs"]["BASE_IMAGE"] for x in client.builds}
    assert args[a.tag] == args[b.tag] != args[c.tag]
    again = build_plan(client, Plan("t", [a, b, c]), BuildOptions(log_dir=tmp_path, check_disk=False, proxies={}),
                       Progress())
    assert [r.status for r in again] == ["up-to-date"] * 3 and len(calls) == 2


def test_bootstrap_failure_fails_every_image_on_it(client, tmp_path, monkeypatch):
    from _support import image, variant

    from imagebuild.builder import bootstrap
    from imagebuild.models import BaseSource, Plan

    def boom(cl, spec, **kw):
        raise bootstrap.BootstrapError("mmdebstrap of bookworm failed (exit 1); full log: /x.log")

    monkeypatch.setattr(bootstrap, "ensure_bootstrap", boom)
    boot = BaseSource(kind="bootstrap")
    a = image("a", "base", None, var=variant("a", base=boot))
    a2 = image("a", "runtime", a, var=a.variant)
    b = image("b", "base", None, var=variant("b", base=boot))
    results = build_plan(client, Plan("t", [a, a2, b]), BuildOptions(log_dir=tmp_path, check_disk=False,
                                                                      proxies={}, keep_going=True), Progress())
    assert [r.status for r in results] == ["failed", "not-built", "failed"]
    assert "mmdebstrap of bookworm failed" in results[0].error and "mmdebstrap" in results[2].error


def test_aliases_full_references_and_short_tags(client, tmp_path):
    a = chain("a", flavors=("base",))
    a[0].aliases = ("ibtest:2.13-cpu-base", "short-alias")
    [res] = run(client, plan_of(a), tmp_path)
    assert client.tags["ibtest:2.13-cpu-base"] == res.image_id
    assert client.tags["ibtest:short-alias"] == res.image_id


def test_size_budget_fails_the_image_and_its_children(client, tmp_path):
    import dataclasses

    a = chain("a")
    var = dataclasses.replace(a[1].variant, size_budget={"runtime": 500})  # fake images are 1000 bytes
    for img in a:
        img.variant = var
    results = run(client, plan_of(a), tmp_path)
    assert [r.status for r in results] == ["built", "failed", "not-built"]
    assert "exceeds the runtime budget" in results[1].error and results[1].image_id
