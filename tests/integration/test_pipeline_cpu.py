"""The whole path on the real CPU matrix: build -> test -> push (htpasswd registry) -> pull back -> test the copy.

On the session's build (conftest.cpu_build), in any test order: the session's one `test` run of it
(conftest.cpu_tested: --retest, so the suite really runs even after another command recorded a pass; its report and
JUnit files in folders of their own, the build's report folder stays a build's report), and the push goes to a
registry namespace of its own (another module pushes the session's tags, which would make this first
push "unchanged"); the session's own tags are never removed.
"""

from __future__ import annotations

import json
import secrets

import pytest
from _helpers import imagebuild
from _images import MATRIX

pytestmark = [pytest.mark.integration, pytest.mark.registry]


@pytest.fixture(scope="module")
def tested(cpu_tested):
    """The session's one `imagebuild test --retest --json` of the CPU images (conftest.cpu_tested)."""
    return cpu_tested.build, cpu_tested.result, cpu_tested.report_dir


def test_smoke_suite_passes_on_every_cpu_image_and_skips_gpu_with_reason(tested):
    build, res, report_dir = tested
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    rows = json.loads(res.stdout)
    assert [r["flavor"] for r in rows] == ["base", "runtime", "dev"]
    for row in rows:
        assert row["failed"] == 0, [c for c in row["checks"] if c["status"] == "failed"]
        assert row["docker_exec"] <= 5
    runtime = {c["name"]: c for c in rows[1]["checks"]}
    # the probe's table names each check (probe/table.py CHECKS): the GPU rows are skipped here, saying why
    gpu_checks = [runtime[n] for n in ("gpu.available", "gpu.nvidia_smi", "gpu.device_arch", "tf32.speedup",
                                       "amp.cuda_bf16", "distributed.nccl")]
    assert all(c["status"] == "skipped" for c in gpu_checks), gpu_checks
    assert all("no GPU visible in the container" in c["reason"] for c in gpu_checks), gpu_checks
    # the CPU substitutes really ran and passed
    passed = {name for name, c in runtime.items() if c["status"] == "passed"}
    assert {"amp.cpu_bf16", "distributed.gloo"} <= passed, sorted(passed)
    junit = list((report_dir.parent / "junit").glob("*.xml"))
    assert len(junit) == 3
    report = json.loads((report_dir / "build-report.json").read_text())
    rows_by_tag = {r["tag"]: r for r in report["images"]}
    for img in build.plan.images:
        row = rows_by_tag[img.tag]
        assert row["status"] in ("built", "up-to-date") and row["image_id"] and row["size"] > 0
        assert row["tests"]["failed"] == 0 and row["tests"]["passed"] > 0


def test_push_pull_back_and_test_the_copy(tested):
    build, res, report_dir = tested
    assert res.returncode == 0
    registry = build.registry
    # a namespace of this test's own: its first push is the first to these tags in any test order
    prefix = f"{registry.address}/ibtest-pipeline-{secrets.token_hex(4)}"
    own = {img.tag: img.tag.replace(build.prefix + "/", prefix + "/", 1) for img in build.plan.images}
    push_dir = report_dir.parent / "push"
    args = ["--matrix", str(MATRIX), "--registry", prefix, "--report-dir", str(push_dir), "-u", registry.user,
            "--password-stdin"]
    client = build.client
    try:
        push = imagebuild("push", *args, stdin=registry.password + "\n")
        assert push.returncode == 0, push.stdout[-3000:] + push.stderr[-3000:]
        report_text = (push_dir / "build-report.json").read_text()
        assert registry.password not in report_text + push.stdout + push.stderr
        rows = {r["tag"]: r for r in json.loads(report_text)["images"]}
        assert set(rows) == set(own.values()), sorted(rows)
        runtime = next(i for i in build.plan.images if i.flavor == "runtime")
        pushed = own[runtime.tag]
        digest = rows[pushed]["push"]["digest"]
        assert rows[pushed]["push"]["status"] == "pushed" and digest.startswith("sha256:")
        assert rows[pushed]["image_id"] == client.api.inspect_image(runtime.tag)["Id"]  # the session's very image

        # pull it back through the registry, with credentials, and test the pulled copy: push tagged the image here
        # under this namespace; that tag goes (the session's tags still hold the image), the pull brings it back
        repo, tag = pushed.rsplit(":", 1)
        client.api.remove_image(pushed)
        auth = {"username": registry.user, "password": registry.password}
        pulled = client.images.pull(repo, tag=tag, auth_config=auth)
        assert any(d.endswith(digest) for d in pulled.attrs["RepoDigests"]), pulled.attrs["RepoDigests"]
        assert pulled.id == client.api.inspect_image(runtime.tag)["Id"]  # the image the session's suite passed
        copy = f"ibtest-pulled-{build.prefix.rsplit('-', 1)[1]}:runtime"
        pulled.tag(copy)
        try:
            # the base flavor's sections (versions against the labels among them): the copy is the image the
            # session's suite passed (same ID, asserted above), so its sections prove the pulled copy starts and
            # reports the same versions, without the runtime suite a third time
            smoke = imagebuild("test", "--image", copy, "--flavor", "base", "--json")
            assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]
            checks = json.loads(smoke.stdout)[0]["checks"]
            versions = [c for c in checks if c["name"].startswith("versions/")]
            assert versions and all(c["status"] in ("passed", "skipped") for c in versions)
        finally:
            client.api.remove_image(copy)

        again = imagebuild("push", *args, stdin=registry.password + "\n")
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        rows = {r["tag"]: r for r in json.loads((push_dir / "build-report.json").read_text())["images"]}
        assert all(rows[own[i.tag]]["push"]["status"] == "unchanged" for i in build.plan.images), \
            {t: r["push"]["status"] for t, r in rows.items()}
        md = (push_dir / "build-report.md").read_text()
        assert runtime.short_tag in md
    finally:  # this namespace's local tags (push tagged each image under it); the session's tags stay
        for ref in own.values():
            try:
                client.api.remove_image(ref)
            except Exception:
                pass


def test_build_with_test_flag_and_relative_report_dir(tested, tmp_path):
    """`imagebuild build --test` as the README's main job runs it: relative --report-dir, from another folder; after
    the module's `test` run (the `tested` fixture) passed the suite on these very images."""
    cpu_build, _, report_dir = tested
    assert cpu_build.result.returncode == 0
    args = [a for a in cpu_build.build_args()]
    i = args.index("--report-dir")
    args[i + 1] = "rel-reports"
    res = imagebuild("build", *args, "--test", cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "3 up-to-date" in res.stdout
    # `test` above already passed this suite on these very images: up to date, no container started
    assert res.stderr.count("up to date: ") == 3, res.stderr[-3000:]
    rows = json.loads((tmp_path / "rel-reports" / "build-report.json").read_text())["images"]
    assert all(r["tests"]["failed"] == 0 and r["tests"]["passed"] > 0 and r["tests"]["up_to_date"] for r in rows)
    assert all(r["build_seconds"] and r["built_at"] for r in rows), rows  # the build that made each image
    import xml.etree.ElementTree as ET

    smoke = ET.parse(tmp_path / "rel-reports" / "build-report.junit.xml").getroot().find("testsuite[@name='smoke']")
    assert (smoke.get("tests"), smoke.get("failures")) == ("3", "0")
    # the per-image JUnit a CI job publishes is there though nothing ran: the recorded run's cases, when and where
    per_image = sorted((tmp_path / "rel-reports" / "junit").glob("*.xml"))
    assert len(per_image) == 3, per_image
    for path in per_image:
        suite = ET.parse(path).getroot().find("testsuite")
        props = {p.get("name"): p.get("value") for p in suite.find("properties")}
        assert props["up_to_date"] == "true" and props["ran_where"] == "cpu" and suite.get("hostname") == "cpu"
        cases = suite.findall("testcase")
        assert len(cases) == int(suite.get("tests")) > 20 and suite.get("failures") == "0"
        assert "up to date: not run again" in suite.find("system-out").text
    # the runtime image's cases are the checks of the run `test` made above (its JSON result), name for name
    ran = json.loads(next((report_dir.parent / "results").glob("*runtime.json")).read_text())  # --results
    runtime = next(p for p in per_image if p.name.endswith("runtime.xml"))
    names = [c.get("name") if c.get("classname") == "smoke" else f"{c.get('classname')[6:]}/{c.get('name')}"
             for c in ET.parse(runtime).getroot().iter("testcase")]
    assert names == [c["name"] for c in ran["checks"]]
    gpu = next(c for c in ET.parse(runtime).getroot().iter("testcase") if c.get("name") == "gpu.available")
    assert "no GPU visible in the container" in gpu.find("skipped").get("message")
