"""imagebuild.pipeline through `test --matrix` and `build`, with a fake engine and a fake suite run: an up-to-date
result writes the same per-image files as a run (from the recorded cases), the record is read once per run, and
--only is refused in one place and one form."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from _fake_engine import FakeEngine
from _support import chain
from click.testing import CliRunner

from imagebuild.errors import UsageError
from imagebuild.models import Plan
from imagebuild.record import load_record, updating
from imagebuild.smoke import runner

CHECKS = [
    {"name": "versions/version[torch]", "status": "passed", "reason": "", "figures": {"torch": "2.13.0"}},
    {"name": "gpu/gpu_available", "status": "skipped", "reason": "no GPU visible in the container", "figures": {}},
    {"name": "hygiene/no_host_keys", "status": "passed", "reason": "", "figures": {}},
]


@pytest.fixture
def matrix_run(monkeypatch, tmp_path):
    """`test --matrix` over a two-image plan whose images are in the fake engine; runs: the images the suite ran in."""
    from imagebuild.commands import test as cmd

    images = chain("2.13.0-cpu-py3.11-debian12", flavors=("base", "runtime"))
    monkeypatch.chdir(tmp_path)
    matrix = tmp_path / "cpu.yaml"
    matrix.write_text("x: 1\n")
    monkeypatch.setattr("imagebuild.pipeline.loaded.make_plan", lambda *a, **k: Plan(str(matrix), images))
    engine = FakeEngine()
    ids = [engine.add_image(img.tag, {"io.imagebuild.inputs-hash": img.inputs_hash}) for img in images]
    runs: list[str] = []

    def fake_run(ref, flavor, exp, **kw):
        runs.append(ref)
        return {"passed": 2, "failed": 0, "skipped": 1, "seconds": 3.5, "checks": [dict(c) for c in CHECKS]}

    monkeypatch.setattr(runner, "docker_client", lambda: engine)
    monkeypatch.setattr(runner, "host_where", lambda client: "cpu")
    monkeypatch.setattr(runner, "run_smoke", fake_run)

    def run(*args: str):
        r = CliRunner().invoke(cmd.command, ["--matrix", str(matrix), "--report-dir", str(tmp_path / "report"),
                                             *args], standalone_mode=False)
        return r

    run.images, run.ids, run.runs, run.matrix = images, ids, runs, matrix  # type: ignore[attr-defined]
    return run


def test_up_to_date_images_get_their_junit_and_json_from_the_recorded_run(matrix_run, tmp_path):
    assert matrix_run().return_value == 0 and len(matrix_run.runs) == 2
    rec = load_record(matrix_run.matrix)
    stored = next(iter(rec.tests.values()))
    assert [c["name"] for c in stored["cases"]] == [c["name"] for c in CHECKS]  # every case, passed ones too
    junit, results = tmp_path / "junit", tmp_path / "results"
    r = matrix_run("--junit", str(junit), "--results", str(results))
    assert r.return_value == 0 and len(matrix_run.runs) == 2, r.output  # up to date: no container
    assert r.output.count("up to date: ") == 2
    files = sorted(p.name for p in junit.glob("*.xml"))
    assert files == sorted(f"{runner.safe_name(i.tag)}.xml" for i in matrix_run.images)
    suite = ET.parse(junit / files[0]).getroot().find("testsuite")
    assert suite.get("tests") == "3" and suite.get("skipped") == "1" and suite.get("failures") == "0"
    assert suite.get("timestamp") == stored["at"] and suite.get("hostname") == "cpu"
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["up_to_date"] == "true" and props["ran_at"] == stored["at"] and props["ran_where"] == "cpu"
    assert [(c.get("classname"), c.get("name")) for c in suite.findall("testcase")] == [
        ("smoke.versions", "version[torch]"), ("smoke.gpu", "gpu_available"), ("smoke.hygiene", "no_host_keys")]
    assert suite.findall("testcase")[1].find("skipped").get("message") == "no GPU visible in the container"
    assert f"the run of {stored['at']} on cpu" in suite.find("system-out").text
    doc = json.loads((results / f"{runner.safe_name(matrix_run.images[1].tag)}.json").read_text())
    assert doc["up_to_date"] is True and doc["image"] == matrix_run.ids[1] and len(doc["checks"]) == 3
    assert "cases" not in doc


def test_a_record_from_before_cases_were_kept_still_gives_a_junit_file(matrix_run, tmp_path):
    assert matrix_run().return_value == 0
    with updating(matrix_run.matrix) as rec:  # as an older version stored it: only the checks that did not pass
        for result in rec.tests.values():
            del result["cases"]
    r = matrix_run("--junit", str(tmp_path / "junit"))
    assert r.return_value == 0 and len(matrix_run.runs) == 2, r.output
    suite = ET.parse(next((tmp_path / "junit").glob("*runtime*.xml"))).getroot().find("testsuite")
    names = [c.get("name") for c in suite.findall("testcase")]
    assert names == ["gpu_available", "2 passed checks (this record does not name them)"]
    assert suite.get("tests") == "2"


def test_the_record_is_read_once_per_run(matrix_run, monkeypatch):
    """Two images tested, each result stored: one read (and trust check) of the record, none after each image."""
    import imagebuild.pipeline.loaded as loaded

    reads: list[object] = []
    real = loaded.load_record
    monkeypatch.setattr(loaded, "load_record", lambda *a, **k: reads.append(a) or real(*a, **k))
    assert matrix_run("--retest").return_value == 0 and len(matrix_run.runs) == 2
    assert len(reads) == 1
    assert matrix_run().return_value == 0 and len(matrix_run.runs) == 2  # the stored results were really kept


def test_only_matching_nothing_is_one_error_for_every_command(matrix_run, monkeypatch):
    r = matrix_run("--only", "nothing-like-this")
    assert isinstance(r.exception, UsageError)
    assert str(r.exception) == f"--only nothing-like-this: matches no image of {matrix_run.matrix}"
    from imagebuild.commands.push import command as push

    r = CliRunner().invoke(push, ["-m", str(matrix_run.matrix), "--only", "nothing-like-this", "--dry-run"],
                           standalone_mode=False)
    assert str(r.exception) == f"--only nothing-like-this: matches no image of {matrix_run.matrix}"


def test_registry_cache_is_not_asked_when_the_engine_holds_every_selected_image(monkeypatch):
    """A no-op makes no network request: the registry is asked only for what this engine lacks."""
    from imagebuild.pipeline import building
    from imagebuild.pipeline.selection import Selection

    images = chain("2.13.0-cpu-py3.11-debian12", flavors=("base", "runtime"))
    engine = FakeEngine()
    asked: list[list[str]] = []

    def find(imgs, auth, log, local_layers=None, pulls_zstd=True):
        asked.append([i.tag for i in imgs])
        return {}

    monkeypatch.setattr(building, "find_in_registry", find)
    selection = Selection((), list(images), list(images))
    engine.add_image(images[0].tag, {"io.imagebuild.inputs-hash": images[0].inputs_hash})
    assert building.registry_lookup(selection, building.locate_all(engine, selection, None), False, print) == {}
    assert asked == [[i.tag for i in images]]  # the runtime is missing: asked, the local base's layers passed as local_layers
    engine.add_image(images[1].tag, {"io.imagebuild.inputs-hash": images[1].inputs_hash})
    assert building.registry_lookup(selection, building.locate_all(engine, selection, None), False, print) == {}
    assert len(asked) == 1  # everything here: not asked again


def test_a_no_op_asks_the_backend_nothing_and_a_build_runs_its_preflight_first(monkeypatch, tmp_path):
    """Every selected image here: the backend's preflight (BuildKit: six docker CLI calls) is not run at all; one
    image missing: it runs once, before anything builds; a preflight that refuses stops the run before any build."""
    from imagebuild.builder.backends.classic.build import ClassicBackend
    from imagebuild.builder.progress import Progress
    from imagebuild.pipeline import building
    from imagebuild.pipeline.selection import Selection
    from imagebuild.pipeline.settings import BuildSettings

    images = chain("2.13.0-cpu-py3.11-debian12", flavors=("base", "runtime"))
    engine = FakeEngine()
    selection = Selection((), list(images), list(images))
    monkeypatch.setattr(building, "unreachable", lambda *a, **k: {})  # the OS image's registry: not asked here
    preflights: list[str] = []

    def make():
        preflights.append("preflight")
        return ClassicBackend(engine)

    def step(maker=make):
        return building.build_step(engine, Plan("m.yaml", images), selection, BuildSettings(), None, Progress(),
                                   tmp_path / "logs", print, ("classic", maker))

    assert [r.status for r in step().results] == ["built", "built"] and preflights == ["preflight"]
    assert len(engine.builds) == 2  # through the backend the preflight made
    assert [r.status for r in step().results] == ["up-to-date", "up-to-date"]
    assert preflights == ["preflight"]  # the no-op: not asked again
    engine.remove(images[1].tag)
    assert [r.status for r in step().results] == ["up-to-date", "built"] and len(preflights) == 2
    engine.remove(images[1].tag)

    def refused():
        raise UsageError("the BuildKit backend needs the docker buildx plugin")

    builds = len(engine.builds)
    with pytest.raises(UsageError, match="needs the docker buildx plugin"):
        step(refused)
    assert len(engine.builds) == builds


def test_a_deferred_preflight_runs_once_and_its_refusal_fails_the_build_in_its_one_line():
    """Expected up to date, yet the executor builds (a parent rebuilt): the preflight runs at that first build."""
    from imagebuild.builder.backend import BuildRequest
    from imagebuild.builder.backends import DeferredBackend

    calls: list[int] = []

    def make():
        calls.append(1)
        raise UsageError("buildx builder 'farm' does not answer")

    backend = DeferredBackend(make)
    assert not backend.started and backend.cleanup(print) == []
    request = BuildRequest(tag="t:1", dockerfile="FROM scratch\n", build_args={}, labels={}, timeout=5)
    for _ in range(2):
        build = backend.start(request)
        assert [e.kind for e in build.events()] == ["error"]
        assert build.outcome().error == "buildx builder 'farm' does not answer" and build.outcome().image_id is None
    assert calls == [1] and backend.started
