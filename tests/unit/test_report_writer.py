"""build-report.json merging across runs, Markdown table, JUnit XML, the report command."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from imagebuild.models import ImageResult
from imagebuild.report import load_report, merge_row, render_markdown, write_reports
from imagebuild.secrets import register_secret

TAG_B = "127.0.0.1:5000/pytorch:2.9.1-cpu-py3.11-debian12-base"
TAG_R = "127.0.0.1:5000/pytorch:2.9.1-cpu-py3.11-debian12-runtime"
VERS = {"torch": "2.9.1", "cuda": "cpu", "python": "3.11", "os": "debian12"}


def built(tag, flavor, image_id="sha256:aaa", inputs_hash="h1", **kw):
    return ImageResult(tag=tag, flavor=flavor, inputs_hash=inputs_hash, versions=VERS, status="built",
                       image_id=image_id, size=1_234_000_000, build_seconds=75.4,
                       layers=[{"size": 900_000_000, "created_by": "|1 BASE_IMAGE=x /bin/sh -c pip install torch"}],
                       **kw)


class _Plan:
    def __init__(self, tags):
        self.matrix_file = "images/cpu.yaml"
        self.images = [type("I", (), {"tag": t})() for t in tags]


def test_build_then_test_then_push_accumulate(tmp_path):
    write_reports([built(TAG_B, "base"), built(TAG_R, "runtime")], tmp_path, _Plan([TAG_B, TAG_R]))
    tests = {"passed": 10, "failed": 0, "skipped": 2, "checks": []}
    write_reports([ImageResult(TAG_R, "runtime", "h1", VERS, tests=tests)], tmp_path)
    push = {"status": "pushed", "digest": "sha256:" + "d" * 64, "tags": [TAG_R], "seconds": 3.2}
    write_reports([ImageResult(TAG_R, "runtime", "h1", VERS, push=push)], tmp_path)
    doc = load_report(tmp_path)
    assert doc["matrix"] == "images/cpu.yaml"
    rows = {r["tag"]: r for r in doc["images"]}
    assert [r["tag"] for r in doc["images"]] == [TAG_B, TAG_R]
    rt = rows[TAG_R]
    assert rt["status"] == "built" and rt["image_id"] == "sha256:aaa" and rt["size"] == 1_234_000_000
    assert rt["tests"]["passed"] == 10 and rt["push"]["status"] == "pushed"
    md = (tmp_path / "build-report.md").read_text()
    assert "| `2.9.1-cpu-py3.11-debian12-runtime` | runtime | ✅ built | 1.23 GB | 1m15s | 10/0/2 |" in md
    assert "pushed `sha256:dddddddddddd`" in md


def test_rebuild_with_new_inputs_drops_old_test_and_push(tmp_path):
    write_reports([built(TAG_R, "runtime", tests={"passed": 1, "failed": 0, "skipped": 0},
                         push={"status": "pushed", "digest": "sha256:x"})], tmp_path)
    write_reports([built(TAG_R, "runtime", image_id="sha256:bbb", inputs_hash="h2")], tmp_path)
    row = load_report(tmp_path)["images"][0]
    assert row["image_id"] == "sha256:bbb" and row["inputs_hash"] == "h2"
    assert "tests" not in row or row["tests"] is None
    assert "push" not in row or row["push"] is None


def test_failed_then_fixed_clears_error():
    old = {"tag": "t", "status": "failed", "error": "step 3 failed"}
    new = {"tag": "t", "status": "built", "error": None, "image_id": "sha256:c"}
    assert merge_row(old, new)["error"] is None


def test_planned_status_never_overwrites():
    assert merge_row({"tag": "t", "status": "built"}, {"tag": "t", "status": "planned"})["status"] == "built"


def test_secrets_redacted_everywhere(tmp_path):
    register_secret("tok-very-secret")
    bad = ImageResult(TAG_R, "runtime", "h", VERS, status="failed",
                      error="pip: https://user:pw1234@idx.example/simple failed with tok-very-secret")
    paths = write_reports([bad], tmp_path)
    for p in paths.values():
        text = p.read_text()
        assert "tok-very-secret" not in text and "pw1234" not in text


def test_junit_suites(tmp_path):
    failed = ImageResult(TAG_B, "base", "h", VERS, status="failed", error="RUN apt-get: exit 100 <&>")
    skipped = ImageResult(TAG_R, "runtime", "h", VERS, status="not-built", error="parent failed",
                          push={"status": "skipped", "reason": "build not-built"})
    paths = write_reports([failed, skipped], tmp_path)
    root = ET.parse(paths["junit"]).getroot()
    assert root.tag == "testsuites"
    build = root.find("testsuite[@name='build']")
    push = root.find("testsuite[@name='push']")
    assert (build.get("tests"), build.get("failures"), build.get("skipped")) == ("2", "1", "1")
    assert (push.get("tests"), push.get("skipped")) == ("1", "1")
    assert "exit 100 <&>" in build.find("testcase/failure").text
    assert root.get("failures") == "1"


def test_markdown_lists_problems_and_escapes_pipes():
    doc = {"matrix": "m.yaml", "images": [
        {"tag": TAG_R, "flavor": "runtime", "status": "failed", "error": "a | b",
         "tests": {"passed": 1, "failed": 1, "skipped": 0,
                   "checks": [{"name": "tf32", "status": "failed", "reason": "allow_tf32 False"}]},
         "push": {"status": "failed", "error": "gave up"}}]}
    md = render_markdown(doc)
    assert "a \\| b" in md and "test `tf32`: allow_tf32 False" in md and "push failed: gave up" in md
    assert "❌ 1/1/0" in md
    assert render_markdown({"images": []}).endswith("No images in this report.\n")


def test_report_command(tmp_path):
    from click.testing import CliRunner

    from imagebuild.commands.report import command

    write_reports([built(TAG_R, "runtime")], tmp_path)
    (tmp_path / "build-report.md").unlink()
    r = CliRunner().invoke(command, ["--report-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "2.9.1-cpu-py3.11-debian12-runtime" in r.output and (tmp_path / "build-report.md").is_file()
    r = CliRunner().invoke(command, ["--report-dir", str(tmp_path), "--format", "json"])
    assert json.loads(r.output)["images"][0]["tag"] == TAG_R
    r = CliRunner().invoke(command, ["--report-dir", str(tmp_path / "none")])
    assert r.exit_code != 0


def test_same_image_with_other_inputs_hash_keeps_build_facts(tmp_path):
    """`test`/`push` may plan without --ca-cert/--wheelhouse (another hash); the same image ID keeps size/tests."""
    write_reports([built(TAG_R, "runtime", tests={"passed": 1, "failed": 0, "skipped": 0})], tmp_path)
    write_reports([ImageResult(tag=TAG_R, flavor="runtime", inputs_hash="other", versions=VERS,
                               image_id="sha256:aaa", push={"status": "pushed", "digest": "sha256:x"})], tmp_path)
    row = load_report(tmp_path)["images"][0]
    assert row["size"] == 1_234_000_000 and row["tests"]["passed"] == 1 and row["push"]["status"] == "pushed"
