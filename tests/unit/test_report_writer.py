"""The report of one run (replaced by the next, history appended), Markdown table, JUnit XML, the report command."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from imagebuild.models import ImageResult
from imagebuild.report import load_report, render_markdown, write_reports
from imagebuild.report.stored import ReportError
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


RUN = {"command": "build", "steps": ["build"], "registry": "127.0.0.1:5000", "id": "run-1"}


def test_a_run_replaces_the_last_report_and_appends_history(tmp_path):
    failed = ImageResult(TAG_B, "base", "h", VERS, status="failed", error="RUN apt-get: exit 100")
    write_reports([failed], tmp_path, _Plan([TAG_B]), run=RUN)
    assert ET.parse(tmp_path / "build-report.junit.xml").getroot().get("failures") == "1"
    write_reports([built(TAG_B, "base"), built(TAG_R, "runtime")], tmp_path, _Plan([TAG_B, TAG_R]),
                  run=dict(RUN, id="run-2"))
    doc = load_report(tmp_path)
    assert doc["run"]["id"] == "run-2" and doc["matrix"] == "images/cpu.yaml" and doc["registry"] == "127.0.0.1:5000"
    assert [r["tag"] for r in doc["images"]] == [TAG_B, TAG_R]
    root = ET.parse(tmp_path / "build-report.junit.xml").getroot()
    assert root.get("failures") == "0" and root.get("tests") == "2"  # the earlier run's failure is gone
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [h["run"]["id"] for h in history] == ["run-1", "run-2"]
    assert history[0]["images"][0]["status"] == "failed"
    md = (tmp_path / "build-report.md").read_text()
    assert md.startswith("### imagebuild build: `images/cpu.yaml`")
    assert "registry `127.0.0.1:5000`" in md and "run `run-2`" in md
    assert "1.23 GB | 1m15s |" in md


def test_up_to_date_row_keeps_the_build_that_made_it(tmp_path):
    row = built(TAG_R, "runtime", image_id="sha256:" + "a" * 64, built_at="2026-11-30T10:00:00Z")
    row.status = "up-to-date"
    write_reports([row], tmp_path, _Plan([TAG_R]), run=RUN)
    md = (tmp_path / "build-report.md").read_text()
    assert "✅ up-to-date (built 2026-11-30T10:00:00Z) | `aaaaaaaaaaaa` | 1.23 GB | 1m15s |" in md


def test_junit_has_only_the_steps_of_this_run(tmp_path):
    tests = {"passed": 3, "failed": 1, "skipped": 0, "seconds": 4.0,
             "checks": [{"name": "versions/torch", "status": "failed", "reason": "torch 2.9.0 != 2.9.1"}]}
    row = built(TAG_R, "runtime", tests=tests, push={"status": "failed", "error": "old push"})
    write_reports([row], tmp_path, _Plan([TAG_R]), run=dict(RUN, command="test", steps=["test"]))
    root = ET.parse(tmp_path / "build-report.junit.xml").getroot()
    assert root.find("testsuite[@name='build']").get("tests") == "0"
    assert root.find("testsuite[@name='push']").get("tests") == "0"
    smoke = root.find("testsuite[@name='smoke']")
    assert (smoke.get("tests"), smoke.get("failures")) == ("1", "1")
    assert "torch 2.9.0 != 2.9.1" in smoke.find("testcase/failure").text


def test_up_to_date_tests_say_so():
    tests = {"passed": 5, "failed": 0, "skipped": 1, "up_to_date": True, "at": "2026-11-30T10:00:00Z"}
    md = render_markdown({"images": [{"tag": TAG_R, "flavor": "runtime", "status": "up-to-date", "tests": tests}]})
    assert "5/0/1 (up to date, 2026-11-30T10:00:00Z)" in md


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


def test_sbom_and_rebuild_diff_sections(tmp_path):
    row = built(TAG_R, "runtime")
    row.sbom = {"path": str(tmp_path / "sbom" / "x-runtime.cdx.json"), "sha256": "sha256:" + "b" * 64,
                "components": 340, "spec": "CycloneDX 1.6", "image_id": "sha256:aaa"}
    row.diff = {"against": "sha256:" + "c" * 64, "os": {"added": 1, "removed": 0, "changed": 2},
                "python": {"added": 0, "removed": 1, "changed": 0}, "text": "OS packages changed:\n  libc6 2.36-9 -> 2.36-10"}
    write_reports([row], tmp_path, _Plan([TAG_R]), run=RUN)
    md = (tmp_path / "build-report.md").read_text()
    assert "`x-runtime.cdx.json` (CycloneDX 1.6, 340 components, `sha256:bbbbbbbbbbbb`)" in md
    assert "against the image before (`cccccccccccc`): os +1 -0 ~2, python +0 -1 ~0" in md
    assert "libc6 2.36-9 -> 2.36-10" in md
    doc = load_report(tmp_path)
    assert doc["images"][0]["sbom"]["sha256"] == "sha256:" + "b" * 64


def test_history_keeps_every_complete_entry_after_a_torn_last_line(tmp_path):
    write_reports([built(TAG_B, "base")], tmp_path, _Plan([TAG_B]), run=RUN)
    history = tmp_path / "history.jsonl"
    history.write_bytes(history.read_bytes() + b'{"run": {"id": "killed-while-wri')
    write_reports([built(TAG_B, "base")], tmp_path, _Plan([TAG_B]), run=dict(RUN, id="run-2"))
    lines = history.read_text().splitlines()
    assert len(lines) == 3 and lines[1] == '{"run": {"id": "killed-while-wri'
    assert [json.loads(ln)["run"]["id"] for ln in (lines[0], lines[2])] == ["run-1", "run-2"]


@pytest.mark.parametrize(("content", "why"), [
    (b'{"schema": 2, "run": {}, "images": [{"tag": "a:b", "sta', "not JSON"),
    (b"\xff\xfe\x00binary", "not UTF-8 text"),
    (b"[1, 2]", "expected an object, got a list"),
    (b'{"images": [{"tag": 5}]}', "images[0].tag: expected a string, got a number"),
    (b'{"images": [{"tag": "t", "tests": {"checks": "x"}}]}', "images[0].tests.checks: expected a list"),
    (b'{"images": [{"tag": "t", "push": {"digest": ["x"]}}]}', "images[0].push.digest: expected a string or null"),
    (b'{"images": [{"tag": "t", "sbom": {"sha256": "x"}}]}', "images[0].sbom: lacks 'path'"),
    (b'{"images": [{"status": "built"}]}', "images[0]: lacks 'tag'"),
    (b'{"run": {"steps": [[1]]}}', "run.steps[0]: expected a string"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
])
def test_damaged_report_is_one_error_line(tmp_path, content, why):
    (tmp_path / "build-report.json").write_bytes(content)
    with pytest.raises(ReportError, match=re.escape(why)) as err:
        load_report(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'build-report.json'}: ") and "\n" not in str(err.value)


def test_truncated_report_given_to_the_command(tmp_path):
    (tmp_path / "build-report.json").write_bytes(b'{"schema": 2, "run": {}, "images": [{"tag": "a:b", "sta')
    proc = subprocess.run([sys.executable, "-c", "from imagebuild.cli import main; main()", "report",
                           "--report-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"error: {tmp_path / 'build-report.json'}") and len(proc.stderr.splitlines()) == 1
