"""The suite's logic on probe results recorded from the real images (tests/fixtures/probe-results/, written by
scripts/record_probe_results.py: `make record-probe-results`). The REAL suite runs through the REAL runner
(smoke/runner.py: its pytest command, its tests dict, JUnit XML and result JSON) against a stand-in container: a
fake `docker` CLI on PATH answers `inspect` with the recorded container config (labels, entrypoint, user) and runs
`exec` here, where a replay zipapp (--probe-pyz) prints the recorded document of the place it is exec'd as, and
fails loudly when asked for sections that place has no recording of. So every check, expectation and skip rule of
the suite meets what real images really report, without an engine.

A recording that no longer matches the current probe (a new check row, a renamed reason) fails here: re-record it.
tests/integration/test_probe_recordings.py (full tier) fails when a fresh run of the real images drifts from it."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zipapp
from pathlib import Path

import pytest

from imagebuild.smoke import probe as P
from imagebuild.smoke import runner, sides

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = sorted((ROOT / "tests" / "fixtures" / "probe-results").glob("*.json"))
_spec = importlib.util.spec_from_file_location("record_probe_results", ROOT / "scripts" / "record_probe_results.py")
assert _spec is not None and _spec.loader is not None
rec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rec)

MAIN = "ibreplay-4f2a9c"  # the stand-in main container; its side containers: MAIN-uid, MAIN-hpc (smoke/sides.py)
SIDE_NAMES = {P.ARBITRARY_UID: f"{MAIN}-uid", P.HPC: f"{MAIN}-hpc"}
SIDE_USERS = {P.ARBITRARY_UID: sides.ARBITRARY_USER, P.HPC: f"{sides.HPC_UID}:{sides.HPC_GID}"}

# the replay probe: the recorded document of the place the fake docker says it runs as, for exactly the sections
# recorded there; anything else is a loud failure (no JSON on stdout: the suite fails that place's checks with it)
REPLAY_MAIN = """\
import json, os, sys
args = sys.argv[1:]
asked = args[args.index("--sections") + 1].split(",")
places = json.load(open({path!r}))["places"]
place = os.environ.get("IB_REPLAY_PLACE")
doc = places.get(place) if place else next((d for d in places.values() if d["probe"]["sections"] == asked), None)
if doc is None or doc["probe"]["sections"] != asked:
    sys.exit("replay probe: no recording of sections " + ",".join(asked) + " as " + str(place) + " (recorded: "
             + "; ".join(w + ": " + ",".join(d["probe"]["sections"]) for w, d in places.items()) + ")")
print(json.dumps(doc))
"""

# the fake docker CLI: `inspect NAME` -> the recorded config; `exec [-u USER] NAME CMD...` -> CMD here, with the
# place it stands for in IB_REPLAY_PLACE (root: the main container exec'd as root) and a line in the exec log
FAKE_DOCKER = """\
#!{python}
import json, os, sys
cfg = json.load(open({cfg!r}))
args = sys.argv[1:]
if args[:1] == ["inspect"]:
    c = cfg.get(args[1]) or sys.exit("Error: No such object: " + args[1])
    print(json.dumps([{{"Name": "/" + args[1], "Config": c["config"]}}]))
    sys.exit(0)
if args[:1] == ["exec"]:
    rest, user = [a for a in args[1:] if a != "-i"], None  # (-i: the probe's zipapp comes on stdin)
    if rest[0] == "-u":
        user, rest = rest[1], rest[2:]
    c = cfg.get(rest[0]) or sys.exit("Error: No such container: " + rest[0])
    place = "root" if user == "root" and c["place"] == "image-user" else c["place"]
    with open({log!r}, "a") as fh:
        fh.write(place + "\\n")
    os.environ["IB_REPLAY_PLACE"] = place
    os.execvp(rest[1], rest[1:])
sys.exit("fake docker: not faked: " + " ".join(args))
"""


# Sections the probe gained after the recordings were made (issue 40: cudalibs, coverage; recording them needs the
# real images on an engine: `make record-probe-results`). A recording holds no document of them, so the replay reports
# each of their checks skipped, saying so (never passed); once re-recorded, this set must be emptied
# (test_there_are_recordings_of_every_cpu_flavor fails while a recording holds a section named here).
NOT_RECORDED: tuple[str, ...] = ()  # sections newer than the recordings (vscode was, until round 15 re-recorded it)
NOT_RECORDED_REASON = f"not recorded: the recording predates this section ({rec.RECORD_COMMAND} records it)"


def load(name: str, raw: bool = False) -> dict:
    """A recording; unless `raw`, brought to the current table (with_unrecorded_sections)."""
    recording = json.loads((ROOT / "tests" / "fixtures" / "probe-results" / name).read_text())
    return recording if raw else with_unrecorded_sections(recording)


def with_unrecorded_sections(recording: dict) -> dict:
    """`recording` with each NOT_RECORDED section its places lack: in the place's sections (the table's order), its
    checks reported skipped with NOT_RECORDED_REASON, and the verdict's rows for them the same skips."""
    out = copy.deepcopy(recording)
    flavor = out["recording"]["flavor"]
    added = []
    for where, doc in out["places"].items():
        table = list(P.sections_for(flavor, where))
        missing = [s for s in table if s not in doc["probe"]["sections"]]
        if not missing or set(missing) - set(NOT_RECORDED):
            continue  # current, or stale beyond what NOT_RECORDED explains: the replay refuses it loudly
        doc["probe"]["sections"] = table
        rows = [c for c in P.checks_for(flavor) if c.section in missing]
        doc["checks"] += [{"name": c.name, "section": c.section, "status": "skipped", "reason": NOT_RECORDED_REASON,
                           "figures": {}} for c in rows]
        added += [c.name for c in rows]
    out["verdict"]["checks"] = out["verdict"]["checks"] + [
        {"name": n, "status": "skipped", "reason": NOT_RECORDED_REASON} for n in added]
    out["verdict"]["skipped"] += len(added)
    return out


def stand_in(tmp_path: Path, recording: dict, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The replay zipapp for `recording`, and the fake docker on PATH; -> the zipapp."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "recording.json").write_text(json.dumps(recording))
    src = tmp_path / "replay"
    src.mkdir()
    (src / "__main__.py").write_text(REPLAY_MAIN.format(path=str(tmp_path / "recording.json")))
    # as large as a probe can grow: past the 128 KiB one command-line argument holds (Linux's MAX_ARG_STRLEN), which
    # the real probe's base64 passed on a real CUDA image ("Argument list too long"): the suite feeds it on stdin
    (src / "ballast.bin").write_bytes(random.Random(7).randbytes(160 << 10))
    zipapp.create_archive(src, tmp_path / "replay.pyz")
    config = recording["container"]
    cfg = {MAIN: {"place": P.IMAGE_USER, "config": config}}
    for place, name in SIDE_NAMES.items():
        cfg[name] = {"place": place, "config": dict(config, User=SIDE_USERS[place])}
    (tmp_path / "containers.json").write_text(json.dumps(cfg))
    docker = tmp_path / "bin" / "docker"
    docker.parent.mkdir()
    docker.write_text(FAKE_DOCKER.format(python=sys.executable, cfg=str(tmp_path / "containers.json"),
                                         log=str(tmp_path / "execs.log")))
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{docker.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/ibreplay.sock")  # the SDK fails; the suite asks the CLI
    return tmp_path / "replay.pyz"


def replay(tmp_path: Path, recording: dict, monkeypatch: pytest.MonkeyPatch, *, flavor: str | None = None,
           expect: dict[str, str] | None = None, require_gpu: bool = False,
           sections: tuple[str, ...] | None = None) -> dict:
    """The runner's suite run (runner._run_suite: what run_smoke does once its containers run) on the stand-in:
    the tests dict, as run_smoke returns it."""
    pyz = stand_in(tmp_path, recording, monkeypatch)
    flavor = flavor or recording["recording"]["flavor"]
    places = [w for w in recording["places"] if w in P.SIDE_CONTAINERS]
    run = runner.SuiteRun(recording["recording"]["image"], flavor, {**recording["expectations"], **(expect or {})},
                          require_gpu, junit_dir=tmp_path / "junit", result_dir=tmp_path / "results",
                          timeout=600, pytest_args=["--probe-pyz", str(pyz), "--probe-python", sys.executable],
                          side_hosts={w: SIDE_NAMES[w] for w in places}, sections=sections)
    extra = {"image": run.label, "container": MAIN, "flavor": flavor, "gpus_requested": False,
             "side_containers": dict(run.side_hosts)}
    return runner._run_suite(MAIN, run, extra, time.time()).to_json()  # a SmokeResult, as run_smoke returns it


def verdict(checks: list[dict]) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["status"], c["reason"]) for c in checks}


def differences(want: dict[str, tuple[str, str]], got: dict[str, tuple[str, str]]) -> list[str]:
    return [f"{n}: recorded {want.get(n)}, replayed {got.get(n)}" for n in sorted(want.keys() | got.keys())
            if want.get(n) != got.get(n)]


def test_there_are_recordings_of_every_cpu_flavor():
    assert [p.name for p in RECORDINGS] == sorted(f"cpu-{f}.json" for f in P.FLAVORS), RECORDINGS
    for path in RECORDINGS:
        head = load(path.name, raw=True)["recording"]
        assert head["image"] and head["image_id"].startswith("sha256:") and head["probe_version"] == P.PROBE_VERSION
        assert rec.RECORD_COMMAND in head["re_record"] and head["recorded"]
        places = load(path.name, raw=True)["places"]  # each place the flavor has, with the table's sections but
        assert {w: [s for s in P.sections_for(head["flavor"], w) if s not in NOT_RECORDED]  # those not recorded yet
                for w in P.WHERE if P.sections_for(head["flavor"], w)} == {
            w: d["probe"]["sections"] for w, d in places.items()}, f"{path.name} is stale: {rec.RECORD_COMMAND}"
        recorded = {s for d in places.values() for s in d["probe"]["sections"]}
        assert not recorded & set(NOT_RECORDED), f"{path.name} records {recorded & set(NOT_RECORDED)}: drop them " \
                                                 "from NOT_RECORDED"
        # the sections not recorded yet: their checks replay as skips saying so, never passes
        added = [c for c in load(path.name)["verdict"]["checks"] if c["reason"] == NOT_RECORDED_REASON]
        assert sorted(c["name"] for c in added) == sorted(
            c.name for c in P.checks_for(head["flavor"]) if c.section in NOT_RECORDED), added
        assert all(c["status"] == "skipped" for c in added)


@pytest.mark.parametrize("name", [p.name for p in RECORDINGS])
def test_replay_gives_the_recorded_verdict(tmp_path, monkeypatch, name):
    """Check by check the same status and reason as the real run; the tests dict, JUnit XML, result JSON and the
    summary table say so; each place's probe ran once, where it belongs."""
    recording = load(name)
    flavor = recording["recording"]["flavor"]
    tests = replay(tmp_path, recording, monkeypatch)
    want, got = verdict(recording["verdict"]["checks"]), verdict(tests["checks"])
    assert not differences(want, got), "\n".join(differences(want, got)) + f"\n(stale? {rec.RECORD_COMMAND})"
    counts = {k: tests[k] for k in ("passed", "failed", "skipped")}
    assert counts == {k: recording["verdict"][k] for k in counts} and sum(counts.values()) == len(want)
    # every GPU row that applies was run and skipped, for want of a GPU (a CPU image on a host without one) but FP8,
    # for want of transformer_engine (not in a CPU image)
    gpu_rows = {c.name: got[c.name] for c in P.checks_for(flavor) if c.gpu}
    assert all(status == "skipped" for status, _ in gpu_rows.values()), gpu_rows
    assert {n for n, (_, why) in gpu_rows.items() if not why.startswith(P.NO_GPU)} <= {"te.fp8"}, gpu_rows
    assert tests["gpu"] is False and tests["flavor"] == flavor and tests["pytest_exit"] == (1 if counts["failed"]
                                                                                           else 0)
    ran = (tmp_path / "execs.log").read_text().split()
    assert sorted(ran) == sorted(recording["places"]) and tests["docker_exec"] == len(ran)
    main = recording["places"][P.IMAGE_USER]["probe"]
    assert tests["probe_seconds"] == main["seconds"] and tests["probe_section_seconds"] == main["section_seconds"]
    # JUnit: one testcase a check, the suite named after the image, skips and failures with their reasons
    suite = ET.parse(tests["junit"]).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite.get("name") == recording["recording"]["image"]
    assert [int(suite.get(k)) for k in ("tests", "failures", "skipped", "errors")] == [
        len(want), counts["failed"], counts["skipped"], 0]
    cases = list(suite.iter("testcase"))
    assert sorted(tc.find("skipped").get("message") for tc in cases if tc.find("skipped") is not None) == sorted(
        r for s, r in want.values() if s == "skipped")
    assert sorted(tc.find("failure").text for tc in cases if tc.find("failure") is not None) == sorted(
        r for s, r in want.values() if s == "failed")
    # the result JSON holds the raw probe documents: recording them again gives this recording
    result = json.loads(Path(tests["result_json"]).read_text())
    info = {"Id": recording["recording"]["image_id"], "Config": recording["container"]}
    again = rec.recording_from_result(result, info, recording["recording"]["image"])
    assert {k: again[k] for k in ("container", "places")} == {k: recording[k] for k in ("container", "places")}
    # the verdict's rows in the run's order, but for the rows of sections not recorded yet (NOT_RECORDED), which have
    # no recorded place in it: compared by name
    assert {**again["verdict"], "checks": sorted(again["verdict"]["checks"], key=lambda c: c["name"])} == {
        **recording["verdict"], "checks": sorted(recording["verdict"]["checks"], key=lambda c: c["name"])}
    table = runner.summary_table([(run_label := recording["recording"]["image"], tests)]).splitlines()
    assert table[0].split()[:5] == ["IMAGE", "FLAVOR", "PASS", "FAIL", "SKIP"]
    assert table[1].split()[:5] == [run_label, flavor, *map(str, counts.values())]
    assert len([ln for ln in table if ln.startswith("FAIL ")]) == counts["failed"]


def test_drift_ignores_the_host_cpus_vector_isas_but_not_a_status_or_another_fact():
    """The full tier's drift check (tests/integration/test_probe_recordings.py) runs on whatever machine runs make
    test-all: release.cpu_isa names that machine's vector ISAs (an AVX-512 host found "drift" against a recording made
    on an AVX2 one), so they are masked like timings and paths; a status change or another reason is still drift."""
    row = {"name": "release.cpu_isa", "status": "passed", "reason": "avx2 on x86_64"}
    assert rec.drift([row], [dict(row, reason="avx512 avx512_vnni on x86_64")]) == []
    assert rec.drift([row], [dict(row, reason="asimd on aarch64")]) != []  # another machine type is another image
    assert rec.drift([row], [dict(row, status="failed", reason="pick_vec_isa: no C++ compiler")]) != []
    assert rec.norm_reason("numpy 2.3.1 in /tmp/x/y") == "numpy N in <path>"


def test_the_recorder_scrubs_run_specific_strings_and_refuses_a_partial_run():
    """recording_from_result (the runner's result JSON -> a recording): container names and IDs, the probe's temp
    folder and log timestamps become placeholders; a run without a document for each place is not recorded."""
    clean = load("cpu-runtime.json")
    name = "ibrecord-pytorch-cpu-2.13.0-runtime-1a2b3c"
    clean["places"][P.HPC]["checks"][0]["reason"] += f" (in {rec.CONTAINER}-hpc, root@{rec.CONTAINER})"
    text = json.dumps(clean["places"])
    dirty = json.loads(text.replace("<hostname>", "20a9370865c5").replace("/tmp/tmp.XXXXXXXXXX", "/tmp/tmp.Ab12Cd34Ef")
                       .replace("WMMDD hh:mm:ss.n", "W1205 08:24:39.231050634").replace(rec.CONTAINER, name))
    assert dirty != clean["places"] and "<hostname>" in text and "MMDD" in text and "/tmp/tmp.X" in text
    result = dict(clean["verdict"], container=name, flavor="runtime", side_containers={
        P.ARBITRARY_UID: f"{name}-uid", P.HPC: f"{name}-hpc"}, probe=dict(dirty.pop(P.IMAGE_USER), extra_probes=dirty))
    info = {"Id": clean["recording"]["image_id"], "Config": clean["container"]}
    assert rec.recording_from_result(result, info, "img")["places"] == clean["places"]
    del result["probe"]["extra_probes"][P.HPC]
    with pytest.raises(rec.RecordError, match="no probe document for hpc"):
        rec.recording_from_result(result, info, "img")
    with pytest.raises(rec.RecordError, match="the suite did not run: suite/timeout: "):
        rec.recording_from_result(dict(result, checks=[{"name": "suite/timeout", "status": "failed",
                                                        "reason": "smoke suite timed out after 1800 s"}]), info, "img")


@pytest.mark.parametrize("place, check", [(P.IMAGE_USER, "release.numpy"), (P.ROOT, "hygiene.tmp"),
                                          (P.ARBITRARY_UID, "uid.tmp_writable"), (P.HPC, "hpc.home")])
def test_a_recording_edited_to_fail_one_check_fails_exactly_that_test(tmp_path, monkeypatch, place, check):
    recording = copy.deepcopy(load("cpu-runtime.json"))
    row = next(c for c in recording["places"][place]["checks"] if c["name"] == check)
    row.update(status="failed", reason="edited: this check failed")
    tests = replay(tmp_path, recording, monkeypatch)
    want = dict(verdict(recording["verdict"]["checks"]), **{check: ("failed", f"{check}: edited: this check failed")})
    got = verdict(tests["checks"])
    assert not differences(want, got), differences(want, got)
    assert tests["failed"] == recording["verdict"]["failed"] + 1 and tests["pytest_exit"] == 1
    assert f"FAIL {recording['recording']['image']} {check}: {check}: edited" in runner.summary_table(
        [(recording["recording"]["image"], tests)])


def test_require_gpu_turns_gpu_skips_into_failures(tmp_path, monkeypatch):
    """--require-gpu fails each GPU row skipped for want of a GPU, once the image is not CPU-only (--expect
    cuda=12.8, as a CUDA image's plan says); nothing else changes but what that expectation itself fails."""
    recording = load("cpu-runtime.json")
    want = verdict(recording["verdict"]["checks"])
    got = verdict(replay(tmp_path / "gpu", recording, monkeypatch, expect={"cuda": "12.8"}, require_gpu=True)[
        "checks"])
    gpu_rows = {c.name for c in P.checks_for("runtime") if c.gpu and want[c.name][1].startswith(P.NO_GPU)}
    assert len(gpu_rows) > 10, gpu_rows
    for name in gpu_rows:
        assert got[name] == ("failed", f"{want[name][1]} (--require-gpu)"), (name, got[name])
    changed = {n: got[n] for n in want if got[n] != want[n] and n not in gpu_rows}
    # what a CUDA image lacking CUDA fails anyway: the version, the toolkit's ENV, the CUDA libraries
    assert changed.keys() == {"versions/version[cuda]", "runtime_contract/nvidia_env", *(
        f"libraries/one_copy[{lib}]" for lib in ("cudnn", "nccl", "cublas", "cudart"))}, changed
    assert changed["versions/version[cuda]"] == ("failed", "cuda: expected 12.8 (--expect cuda), found cpu (torch "
                                                           "built without CUDA)")
    # a CPU-only image: --require-gpu alone leaves its GPU rows skipped (nothing a GPU could change)
    monkeypatch.undo()
    alone = verdict(replay(tmp_path / "cpu", recording, monkeypatch, require_gpu=True)["checks"])
    assert not differences(want, alone), differences(want, alone)


def test_expect_overrides_name_key_expected_found(tmp_path, monkeypatch):
    """--expect wins over the labels: one that disagrees fails naming key, expected value and source, and what the
    image has; one that agrees passes naming both sources. Nothing else changes."""
    recording = load("cpu-runtime.json")
    doc = recording["places"][P.IMAGE_USER]
    tests = replay(tmp_path, recording, monkeypatch, expect={"torch": "2.9.1", "os": "ubuntu24.04",
                                                              "python": doc["versions"]["python"]})
    want, got = verdict(recording["verdict"]["checks"]), verdict(tests["checks"])
    changed = {n: got[n] for n in want if got[n] != want[n]}
    os_found = f"{doc['system']['os']['key']} ({doc['system']['os']['pretty_name']})"
    assert changed == {
        "versions/version[torch]": ("failed", f"torch: expected 2.9.1 (--expect torch), found "
                                              f"{doc['versions']['torch']}"),
        "versions/os": ("failed", f"os: expected ubuntu24.04 (--expect os), found {os_found}"),
        # an override that agrees: a pass naming both sources
        "versions/python": ("passed", f"python {doc['versions']['python']} matches {doc['versions']['python']} "
                                      f"(--expect python), {recording['container']['Labels']['io.imagebuild.python']}"
                                      " (label io.imagebuild.python)"),
    }, changed


def test_the_replay_probe_refuses_sections_it_has_no_recording_of(tmp_path, monkeypatch):
    """The runtime image's recording, tested as dev: the main probe is asked for dev's sections too, which were not
    recorded: each check of that place fails saying so (a replay can never pass on what it does not hold)."""
    tests = replay(tmp_path, load("cpu-runtime.json"), monkeypatch, flavor="dev")
    got = verdict(tests["checks"])
    main_rows = [c.name for c in P.checks_for("dev") if c.where == P.IMAGE_USER]
    for name in main_rows:
        assert got[name][0] == "failed" and "replay probe: no recording of sections system," in got[name][1], (
            name, got[name])
    assert got["hygiene.tmp"][0] == "passed" and got["hpc.home"][0] == "passed"  # recorded places still replay


# the suite's test files and the section each checks (a hand-written test's name is FILE/TEST), and the tests that
# name a section of their own (`@pytest.mark.section(...)` right above them)
FILE_SECTIONS: dict[str, str] = {}
TEST_SECTIONS: dict[str, str] = {}
for _path in runner.SUITE_DIR.glob("test_*.py"):
    if _path.name == "test_checks.py":
        continue
    _file, _pending = _path.stem.removeprefix("test_"), None
    for _line in _path.read_text().splitlines():
        _mark = re.match(r'(pytestmark = |@)pytest\.mark\.section\("(\w+)"\)', _line)
        if _mark and _mark[1] == "pytestmark = ":
            FILE_SECTIONS[_file] = _mark[2]
        elif _mark:
            _pending = _mark[2]
        elif _line.startswith("def test_") and _pending:
            TEST_SECTIONS[f"{_file}/{_line[4:].split('(')[0].removeprefix('test_')}"] = _pending
            _pending = None


def section_of(name: str) -> str | None:
    """The probe section a verdict row belongs to (None: the per-place `checks/...` rows)."""
    head, sep, _ = name.partition("/")
    if sep:
        return None if head == "checks" else TEST_SECTIONS.get(name.split("[")[0], FILE_SECTIONS[head])
    return name.split(".", 1)[0]


def narrowed(recording: dict, sections: set[str]) -> dict:
    """What the probe reports when asked for only `sections`: each place's document cut to them, a place left
    without one gone (the recorded documents hold each section's checks and facts under its name)."""
    out = copy.deepcopy(recording)
    every = set(P.SECTIONS)
    for where, doc in list(out["places"].items()):
        keep = [s for s in doc["probe"]["sections"] if s in sections]
        if not keep:
            del out["places"][where]
            continue
        doc["probe"]["sections"] = keep
        doc["checks"] = [c for c in doc["checks"] if c["name"].split(".", 1)[0] in sections]
        for key in [k for k in doc if k in every and k not in sections]:
            del doc[key]
    return out


@pytest.mark.parametrize("chosen", [("versions", "system", "uid"), ("te", "hpc", "versions"),
                                    ("compile", "release", "hpc")], ids=lambda c: ",".join(c))
def test_sections_run_only_those_sections_and_places_with_the_same_verdict(tmp_path, monkeypatch, chosen):
    """`--sections` as the derived-image tests use it (test_smoke_images.py): each probe place is asked for exactly
    its chosen sections and a place without one is not probed; each row the run reports is the whole run's row (no
    test fails for a section it reads that was not asked for), and every row of those sections is there."""
    recording = load("cpu-runtime.json")
    tests = replay(tmp_path, narrowed(recording, set(chosen)), monkeypatch, sections=chosen)
    want, got = verdict(recording["verdict"]["checks"]), verdict(tests["checks"])
    assert {n: got[n] for n in got if got[n] != want.get(n)} == {}
    places = [w for w in P.WHERE if set(P.sections_for("runtime", w)) & set(chosen)]
    assert got.keys() == {n for n in want if section_of(n) in chosen} | {
        f"checks/reported_checks_have_rows[{w}]" for w in places}
    assert sorted((tmp_path / "execs.log").read_text().split()) == sorted(places)
    assert tests["failed"] == 0 and tests["passed"] + tests["skipped"] == len(got)
    assert {n for n in got if section_of(n) not in chosen} <= {f"checks/reported_checks_have_rows[{w}]"
                                                                 for w in places}


def test_sections_ask_the_suite_and_start_only_the_side_containers_they_need(tmp_path):
    cmd = runner.SuiteRun("img", "runtime", sections=("versions", "system", "uid")).command("c", tmp_path / "r.json")
    assert cmd[cmd.index("--sections") + 1] == "versions,system,uid"
    assert "--sections" not in runner.SuiteRun("img", "runtime").command("c", tmp_path / "r.json")
    assert [s.where for s in sides.for_flavor("runtime", ("versions", "system", "uid"))] == [P.ARBITRARY_UID]
    assert [s.where for s in sides.for_flavor("runtime", ("compile", "hpc"))] == [P.HPC]
    assert [s.where for s in sides.for_flavor("runtime")] == [P.ARBITRARY_UID, P.HPC]


def test_an_unknown_section_is_refused_with_the_choices(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"sections: unknown section nope; choices: system, hygiene, "):
        runner.run_smoke("img", sections=("versions", "nope"))
    recording = load("cpu-runtime.json")
    tests = replay(tmp_path, recording, monkeypatch, sections=("versions", "nope"))
    assert tests["failed"] == 1 and tests["checks"][0]["name"] == "suite/run"
    assert "--sections 'versions,nope': unknown section nope; choices: system," in tests["checks"][0]["reason"]


def test_plain_pytest_run_takes_flavor_and_expectations_from_the_labels(tmp_path, monkeypatch):
    """`pytest --hosts=docker://NAME suite` by hand (no runner, no side containers): the flavor and expectations
    come from the container's labels, two probe runs (the image's user, root), the side places skip."""
    recording = load("cpu-runtime.json")
    pyz = stand_in(tmp_path, recording, monkeypatch)
    out = subprocess.run([sys.executable, "-m", "pytest", f"--hosts=docker://{MAIN}", str(runner.SUITE_DIR), "-q",
                          "-p", "no:cacheprovider", "--probe-pyz", str(pyz), "--probe-python", sys.executable,
                          "--smoke-json", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    doc = json.loads((tmp_path / "r.json").read_text())
    host = next(iter(doc["hosts"].values()))
    assert (host["flavor"], host["flavor_source"], host["docker_exec"]) == ("runtime", "label", 2), host
    got, want = verdict(doc["checks"]), verdict(recording["verdict"]["checks"])
    assert got.keys() == want.keys(), got.keys() ^ want.keys()
    # what the side containers' probes would have answered skips, saying how to start them; the rest as recorded
    skipped = {n for n in want if got.get(n) != want[n]}
    side_rows = {c.name for c in P.checks_for("runtime") if c.where in P.SIDE_CONTAINERS}
    assert skipped == side_rows | {"checks/reported_checks_have_rows[arbitrary-uid]",
                                   "checks/reported_checks_have_rows[hpc]", "hpc_runtime/hpc_mode_is_real"}, skipped
    assert all(got[n][0] == "skipped" and "pass --side " in got[n][1] for n in skipped), {n: got[n] for n in skipped}
    assert out.returncode == (1 if doc["failed"] else 0), out.stdout[-2000:]


def test_the_suite_judges_kernel_coverage_and_the_nccl_pin_against_the_matrix(tmp_path, monkeypatch):
    """coverage.kernels and cudalibs.nccl_version as a CUDA image's probe reports them (edited into the runtime
    recording), tested against the matrix's expectations: a target GPU a library has no code for fails naming the
    library (and its wheel) and the architecture; the GPUs that run only through PTX JIT are said so; a libnccl
    other than the matrix's NCCL pin fails naming both versions."""
    lib = "/opt/venv/lib/python3.11/site-packages/nvidia/nvjpeg/lib/libnvjpeg.so.12"

    def cuda_image(ptx: list[str]) -> dict:
        recording = copy.deepcopy(load("cpu-runtime.json"))
        main = recording["places"][P.IMAGE_USER]
        main["coverage"] = {"libraries": {lib: {"sass": ["sm_80", "sm_90"], "ptx": ptx, "ptx_isa": ["8.8"],
                                                "owner": "nvidia-nvjpeg-cu12"}}, "sass": ["sm_80", "sm_90"], "ptx": ptx}
        rows = {c["name"]: c for c in main["checks"]}
        rows["coverage.kernels"].update(status="passed", reason="1 CUDA libraries read (SASS sm_80 sm_90)")
        rows["cudalibs.nccl_version"].update(status="passed", reason="libnccl 2.27.5 = torch was built against NCCL "
                                             "2.27.5", figures={"library": "2.27.5", "built": "2.27.5"})
        return recording

    got = verdict(replay(tmp_path / "a", cuda_image([]), monkeypatch, expect={"gpu_archs": "sm_90,sm_100",
                                                                              "nccl": "2.28.9"})["checks"])
    assert got["coverage.kernels"] == ("failed", f"gpu_archs sm_90,sm_100: {lib} (nvidia-nvjpeg-cu12): no sm_100 "
                                                 "SASS or PTX (has SASS sm_80 sm_90, PTX none)")
    assert got["cudalibs.nccl_version"] == ("failed", "libnccl is 2.27.5, the matrix pins NCCL 2.28.9 (--expect nccl)")
    monkeypatch.undo()
    got = verdict(replay(tmp_path / "b", cuda_image(["compute_90"]), monkeypatch,
                         expect={"gpu_archs": "sm_86,sm_90", "gpus": "b200=10.0", "nccl": "2.27"})["checks"])
    assert got["coverage.kernels"] == ("passed", "1 CUDA libraries: the target GPUs run natively: sm_86, sm_90; only "
                                                 "through PTX JIT: sm_100")
    assert got["cudalibs.nccl_version"] == ("passed", "libnccl 2.27.5 = torch was built against NCCL 2.27.5")
