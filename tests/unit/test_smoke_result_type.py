"""The smoke result as one versioned type (smokeresult.py, issue 38 item 6): a real recorded run (tests/fixtures/
probe-results/) made into a SmokeResult by the runner round-trips through its JSON and fits smokeresult.schema.json; a
document of another schema version or a damaged one is refused with ONE line naming where it came from, the key, what
was expected and what was found (the CLI prints it as one `error:` line); one written before the type (no version)
still reads, and never as a pass it was not."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from imagebuild.catalog import local_record
from imagebuild.record import passed_result
from imagebuild.record.store import SCHEMA, Record
from imagebuild.smoke import runner
from imagebuild.smoke.probe import PROBE_VERSION
from imagebuild.smokeresult import (
    RESULT_SCHEMA_VERSION,
    VERSION_KEY,
    CheckResult,
    SmokeResult,
    SmokeResultError,
    schema,
)

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = sorted((ROOT / "tests" / "fixtures" / "probe-results").glob("*.json"))


def suite_document(recording: dict) -> dict:
    """What the suite's --smoke-json says of a recorded run: its verdict, and the places' probe documents."""
    places = recording["places"]
    extra = {w: {"doc": d, "wall": d["probe"]["seconds"] + 0.5, "where": w} for w, d in places.items()
             if w != "image-user"}
    host = {"flavor": recording["recording"]["flavor"], "docker_exec": len(places), "probe_wall_seconds": 30.0,
            "probe": places["image-user"], "extra_probes": extra}
    verdict = recording["verdict"]
    return {**{k: verdict[k] for k in ("passed", "failed", "skipped")},
            "checks": [dict(c, figures={"n": i}) for i, c in enumerate(verdict["checks"])],
            "hosts": {"docker://c": host}}


def collected(recording: dict) -> SmokeResult:
    run = runner.SuiteRun(recording["recording"]["image"], recording["recording"]["flavor"])
    extra = {"image": recording["recording"]["image"], "container": "c", "gpus_requested": False,
             "side_containers": {"arbitrary-uid": "c-uid"}, "notes": ["a note"], "start_seconds": 1.5}
    result, _probe = runner._collect(suite_document(recording), run, extra, 0, Path("/tmp/c.log"))
    return result.replace(seconds=42.0, where="cpu")


@pytest.fixture(params=[p.name for p in RECORDINGS])
def recording(request) -> dict:
    return json.loads((ROOT / "tests" / "fixtures" / "probe-results" / request.param).read_text())


def test_a_recorded_run_round_trips_and_fits_the_schema(recording):
    result = collected(recording)
    verdict = recording["verdict"]
    assert (result.passed, result.failed, result.skipped) == (verdict["passed"], verdict["failed"],
                                                              verdict["skipped"])
    assert [(c.name, c.status, c.reason) for c in result.checks] == [
        (c["name"], c["status"], c["reason"]) for c in verdict["checks"]]
    assert result.probe_version == PROBE_VERSION == recording["recording"]["probe_version"]
    assert result.probe_seconds == recording["places"]["image-user"]["probe"]["seconds"]
    assert result.flavor == recording["recording"]["flavor"] and result.notes == ("a note",)
    doc = json.loads(json.dumps(result.to_json()))  # as written to disk
    assert doc[VERSION_KEY] == RESULT_SCHEMA_VERSION == 1
    assert SmokeResult.from_json(doc, "t") == result
    jsonschema.Draft202012Validator.check_schema(schema())
    jsonschema.validate(doc, schema(), cls=jsonschema.Draft202012Validator)


def test_the_schema_fails_a_broken_result(recording):
    doc = collected(recording).to_json()
    validator = jsonschema.Draft202012Validator(schema())
    assert not list(validator.iter_errors(doc))
    broken = [dict(doc, **{VERSION_KEY: 2}), dict(doc, passed="3"), dict(doc, extra_key=1),
              {k: v for k, v in doc.items() if k != "failed"},
              dict(doc, checks=[dict(doc["checks"][0], status="broken")]),
              dict(doc, checks=[{k: v for k, v in doc["checks"][0].items() if k != "name"}])]
    for bad in broken:
        assert list(validator.iter_errors(bad)), bad
    for bad in broken[:2] + broken[3:]:  # from_json refuses each the same way
        with pytest.raises(SmokeResultError):
            SmokeResult.from_json(bad, "t")
    # but for a key it does not name (a record's own bookkeeping: the schema is of what to_json writes)
    assert SmokeResult.from_json(broken[2], "t") == SmokeResult.from_json(doc, "t")


def _refusal(doc: object, source: str = "results/img.json") -> str:
    with pytest.raises(SmokeResultError) as info:
        SmokeResult.from_json(doc, source)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{source}: "), text
    assert info.value.exit_code == 2
    return text


def test_a_result_of_another_schema_version_is_refused_in_one_line(recording):
    doc = collected(recording).to_json()
    for version in (2, 0, "1", True):
        text = _refusal(dict(doc, **{VERSION_KEY: version}))
        assert f"schema_version: found {json.dumps(version)}, expected {RESULT_SCHEMA_VERSION}" in text, text


@pytest.mark.parametrize("edit, key, expected", [
    (lambda d: d.update(passed="53"), "passed", "expected a whole number >= 0, found \"53\""),
    (lambda d: d.update(failed=-1), "failed", "expected a whole number >= 0, found -1"),
    (lambda d: d.pop("skipped"), "skipped", "found nothing (the key is missing)"),
    (lambda d: d["checks"][3].update(status="flaky"), "checks[3].status",
     "expected one of passed, failed, skipped, found \"flaky\""),
    (lambda d: d["checks"][0].update(figures=[1]), "checks[0].figures", "expected an object"),
    (lambda d: d["checks"][1].pop("name"), "checks[1].name", "expected a string (the check's name)"),
    (lambda d: d.update(checks={"a": 1}), "checks", "expected a list of checks, found an object"),
    (lambda d: d.update(gpu="yes"), "gpu", "expected true/false or null"),
    (lambda d: d.update(notes=["ok", 3]), "notes[1]", "expected a string, found 3"),
    (lambda d: d.update(probe_section_seconds={"amp": "1s"}), "probe_section_seconds.amp", "expected numbers"),
])
def test_a_damaged_result_is_refused_naming_the_key(edit, key, expected):
    recording = json.loads(RECORDINGS[0].read_text())
    doc = copy.deepcopy(collected(recording).to_json())
    edit(doc)
    text = _refusal(doc)
    assert f"smoke result {key}: " in text and expected in text, text
    assert _refusal([doc]).endswith("smoke result (the document): expected an object, found a list")


def test_a_result_written_before_the_type_reads_as_version_1_and_never_as_a_pass():
    old = {"passed": 2, "failed": 0, "skipped": 1, "seconds": 3.5, "flavor": "runtime", "docker_exec": 2,
           "checks": [{"name": "a", "status": "passed", "reason": "", "figures": {}}]}
    result = SmokeResult.from_json(old, "old report")
    assert (result.passed, result.failed, result.skipped, result.flavor) == (2, 0, 1, "runtime")
    assert result.to_json() == {VERSION_KEY: 1, **old}
    # a hand-made old one without counts: the counts are its checks', a failed check stays a failure
    bare = SmokeResult.from_json({"checks": [{"name": "x", "status": "failed", "reason": "broken"}]}, "old")
    assert (bare.passed, bare.failed, bare.skipped) == (0, 1, 0) and bare.failures()[0].reason == "broken"
    # the version written from now on: the counts are required
    assert "smoke result passed: " in _refusal({VERSION_KEY: 1, "checks": []})


def test_the_record_and_the_catalog_never_reuse_a_result_of_another_version(tmp_path):
    from imagebuild.record import store_result

    rec = Record(matrix="m.yaml", matrix_digest=None, inputs={}, registry=None)
    summary = store_result(rec, "k", "sha256:" + "a" * 64, "suite", {}, {}, "cpu",
                           SmokeResult.tally([CheckResult("a", "passed"), CheckResult("b", "skipped", "no GPU")],
                                             seconds=2.0))
    assert summary[VERSION_KEY] == RESULT_SCHEMA_VERSION and [c["name"] for c in summary["cases"]] == ["a", "b"]
    assert passed_result(rec, "k") is summary
    read = SmokeResult.from_json(summary, "record")  # the record's cases are the result's checks
    assert [c.name for c in read.checks] == ["a", "b"] and read.where == "cpu" and read.seconds == 2.0
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema": SCHEMA, "images": {}, "tests": {"k": summary}}))
    assert [r.passed for r in local_record("sha256:" + "a" * 64, path).runs] == [1]
    newer = dict(summary, **{VERSION_KEY: RESULT_SCHEMA_VERSION + 1})
    rec.tests["k"] = newer
    assert passed_result(rec, "k") is None  # tested again, never taken as a pass
    path.write_text(json.dumps({"schema": SCHEMA, "images": {}, "tests": {"k": newer}}))
    assert local_record("sha256:" + "a" * 64, path) is None  # the catalog: not tested


def test_a_suite_document_the_runner_cannot_read_is_one_failed_check():
    recording = json.loads(RECORDINGS[0].read_text())
    raw = suite_document(recording)
    raw["checks"][2]["status"] = "weird"
    result, _ = runner._collect(raw, runner.SuiteRun("img"), {"image": "img"}, 1, Path("/tmp/c.log"))
    assert (result.passed, result.failed, result.skipped) == (0, 1, 0) and result.pytest_exit == 1
    assert result.checks[0].name == "suite/result" and "checks[2].status" in result.checks[0].reason


def test_the_report_command_refuses_a_row_of_another_version_with_one_error_line(tmp_path):
    from imagebuild.report import write_reports
    from imagebuild.report.writer import row_to_result

    result = SmokeResult.tally([CheckResult("a", "failed", "broken")], image="img:1")
    write_reports([row_to_result({"tag": "reg/img:1", "status": "built", "tests": result.to_json()})], tmp_path)
    report = tmp_path / "build-report.json"
    ok = subprocess.run([sys.executable, "-m", "imagebuild", "report", "--report-dir", str(tmp_path)],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "test `a`: broken" in ok.stdout, ok.stderr
    doc = json.loads(report.read_text())
    doc["images"][0]["tests"][VERSION_KEY] = 7
    report.write_text(json.dumps(doc))
    r = subprocess.run([sys.executable, "-m", "imagebuild", "report", "--report-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip() == (f"error: {report}: images[0].tests: smoke result schema_version: found 7, expected 1 "
                                "(written by another imagebuild version: test the image again with this one)")
