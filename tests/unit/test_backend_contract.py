"""Every registered backend (a row of imagebuild/backends.py, made through its plug-in's preflight) through the same
cases: it builds one request, reports a failing step with the shared diagnosis, cancels, refuses a run option only
another backend understands, and declares every feature the templates ask for.

A backend reaches the engine only through engine/ (the SDK store or the docker CLI), so each has a harness here over
THE fake engine (_fake_engine.py) or THE fake docker CLI (_fake_docker_cli.py). A new row without a harness fails
`test_every_row_has_a_harness`: a third backend is its folder, its row, and its harness here.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest
from _fake_docker_cli import BUILT, failing_rawjson, install_fake_docker
from _fake_engine import FakeEngine
from _support import image

from imagebuild.backends import BACKENDS, Features, spec
from imagebuild.builder.backend import BuildBackend, BuildRequest
from imagebuild.builder.backends import make_backend
from imagebuild.errors import UsageError
from imagebuild.inputs import BuildInputs
from imagebuild.models import Plan
from imagebuild.pipeline import building
from imagebuild.pipeline.settings import BuildSettings
from imagebuild.render import render_image

PARENT = "sha256:" + "ab" * 32
EXPECTED, GOT = "0" * 64, "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"
PIP_REFUSAL = [
    "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the package "
    "versions, please update the hashes.",
    "    six==1.17.0 from https://files.pythonhosted.org/packages/b7/ce/six-1.17.0-py2.py3-none-any.whl:",
    f"        Expected sha256 {EXPECTED}",
    f"             Got        {GOT}",
]
FINDING = ("pip refused 1 file(s) whose sha256 is not the lock's: six-1.17.0-py2.py3-none-any.whl (six==1.17.0): "
           f"the lock expects sha256 {EXPECTED}, the file has sha256 {GOT}")


class ClassicHarness:
    """The classic builder over the fake engine's store: it streams classic-builder chunks."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.store = FakeEngine()
        self.store.add_image(None, {}, image_id=PARENT)

    def backend(self) -> BuildBackend:
        return make_backend("classic", self.store)

    def image_in_engine(self, tag: str) -> str | None:
        return self.store.image_id(tag)

    def fail_with(self, output: list[str]) -> None:
        self.store.build_streams.append(
            [{"stream": "Step 1/2 : FROM scratch\n"}, {"stream": "Step 2/2 : RUN pip install --require-hashes\n"}]
            + [{"stream": line + "\n"} for line in output]
            + [{"error": "The command '/bin/sh -c pip install' returned a non-zero code: 1"}])

    def hang(self) -> None:
        def slow() -> Iterator[dict]:
            yield {"stream": "Step 1/1 : RUN sleep 30\n"}
            for _ in range(600):
                time.sleep(0.05)
                yield {"stream": ""}
        self.store.build_streams.append(slow())


class BuildKitHarness:
    """BuildKit over the fake docker CLI: it answers as docker 26.1 + buildx 0.13.1 and replays rawjson."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp_path, self.monkeypatch = tmp_path, monkeypatch
        install_fake_docker(tmp_path, monkeypatch)
        self.store = FakeEngine()  # not asked: this backend reaches the engine through the CLI

    def backend(self) -> BuildBackend:
        return make_backend("buildkit", self.store)

    def image_in_engine(self, tag: str) -> str | None:
        return BUILT  # what the fake CLI's `image inspect` answers for the tag buildx built

    def fail_with(self, output: list[str]) -> None:
        stream = self.tmp_path / "failing.rawjson"
        stream.write_text(failing_rawjson(output))
        self.monkeypatch.setenv("FAKE_STREAM", str(stream))
        self.monkeypatch.setenv("FAKE_RC", "1")

    def hang(self) -> None:
        self.monkeypatch.setenv("FAKE_SLEEP", "30")


HARNESSES = {"classic": ClassicHarness, "buildkit": BuildKitHarness}


@pytest.fixture(params=sorted(BACKENDS))
def harness(request, tmp_path, monkeypatch):
    if request.param not in HARNESSES:
        pytest.fail(f"backend {request.param!r} has no harness in tests/unit/test_backend_contract.py")
    return HARNESSES[request.param](tmp_path, monkeypatch)


def _request() -> BuildRequest:
    return BuildRequest(tag="ib/x:1-runtime", dockerfile="ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN true\n",
                        build_args={"A": "1"}, labels={"io.imagebuild.flavor": "runtime"}, timeout=30,
                        parents={"BASE_IMAGE": PARENT})


def test_every_row_has_a_harness():
    assert set(HARNESSES) == set(BACKENDS)


def test_builds_one_request_to_the_engine_s_image(harness):
    build = harness.backend().start(_request())
    events = list(build.events())
    outcome = build.outcome()
    assert not outcome.failed and outcome.image_id is not None and outcome.image_id.startswith("sha256:")
    assert outcome.image_id == harness.image_in_engine("ib/x:1-runtime")
    assert [e.text for e in events if e.kind == "image"][-1:] == [outcome.image_id]
    assert any(e.kind == "step" for e in events) and not any(e.kind == "error" for e in events)


def test_a_failing_step_is_reported_with_the_shared_diagnosis(harness):
    harness.fail_with(["Collecting six==1.17.0", *PIP_REFUSAL])
    build = harness.backend().start(_request())
    events = list(build.events())
    outcome = build.outcome()
    assert outcome.failed and outcome.image_id is None
    assert outcome.error.startswith(FINDING), outcome.error
    assert re.search(r" \((Step 2/2|\[pip 1/2\]), pip install --require-hashes\)$", outcome.error), outcome.error
    assert f"Got        {GOT}" in outcome.tail
    assert sum(e.kind == "error" for e in events) == 1 and events[-1].kind == "error"


def test_a_failure_without_a_finding_names_the_step_and_the_builder_s_reason(harness):
    harness.fail_with(["collecting six", "ERROR: no matching distribution"])
    build = harness.backend().start(_request())
    list(build.events())
    outcome = build.outcome()
    assert outcome.failed and "pip refused" not in outcome.error
    assert re.match(r"^(Step 2/2 : RUN pip install|\[pip 1/2\] RUN echo collecting six).*: ", outcome.error)


def test_cancel_before_the_build_starts_and_while_it_runs(harness):
    build = harness.backend().start(_request())
    build.cancel()
    events = list(build.events())
    assert build.outcome().failed and build.outcome().error.endswith("interrupted") and events[-1].kind == "error"
    harness.hang()
    build = harness.backend().start(_request())
    threading.Timer(0.5, build.cancel).start()
    started = time.monotonic()
    events = list(build.events())
    assert time.monotonic() - started < 10  # the hanging build was stopped, not waited out
    assert build.outcome().error.endswith("interrupted") and events[-1].kind == "error"


OPTIONS = [(row.name, other.name, option) for row in BACKENDS.values() for other in BACKENDS.values()
           if other.name != row.name for option in other.options]


@pytest.mark.parametrize(("name", "owner", "option"), OPTIONS, ids=[f"{n}-{o.flag}" for n, _, o in OPTIONS])
def test_an_option_only_another_backend_understands_is_refused(name, owner, option):
    plan = Plan("m.yaml", [image("a", "base", None)])
    with pytest.raises(UsageError) as err:  # chosen_backend: before any preflight or engine question
        building.chosen_backend(plan, BuildInputs(backend=name), BuildSettings(backend_options={option.setting: "x"}))
    assert str(err.value).startswith(f"{option.flag}: only the {owner} backend understands it, and this build "
                                     f"renders for and builds with {name}")
    assert "\n" not in str(err.value)
    chosen, own = building.chosen_backend(plan, BuildInputs(backend=owner),
                                          BuildSettings(backend_options={option.setting: "x"}))
    assert chosen == owner and own[option.setting] == "x"


def test_the_refusal_cases_cover_every_option_of_every_row():
    owned = {o.flag for row in BACKENDS.values() for o in row.options}
    assert {o.flag for _, _, o in OPTIONS} == owned if len(BACKENDS) > 1 else not owned


TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
# what each feature puts into a rendered Dockerfile (BuildKit syntax the classic builder refuses)
FEATURE_SYNTAX = {"cache_mounts": "--mount=type=cache", "build_secrets": "--mount=type=secret",
                  "named_contexts": None,  # a build-time choice (the parent as a named context), not rendered
                  "other_platforms": None,  # a build-time choice (--platform), not rendered
                  "linked_copies": "COPY --link --from=tier-"}


def test_every_feature_the_templates_ask_for_is_declared_by_the_table():
    asked = {m for path in TEMPLATES.rglob("*.j2") for m in re.findall(r"features\.(\w+)", path.read_text())}
    declared = {f.name for f in fields(Features)}
    assert asked and asked <= declared, f"templates ask for undeclared features: {sorted(asked - declared)}"
    assert set(FEATURE_SYNTAX) == declared


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_a_backend_gets_the_syntax_of_its_features_and_no_other(name):
    from _render_cases import CPU

    inputs = BuildInputs(pip_extra_index_urls=("https://u:pw@idx.example/simple",), backend=name)
    text = render_image(CPU, "runtime", inputs).dockerfile
    for feature, syntax in FEATURE_SYNTAX.items():
        if syntax is not None:
            assert (syntax in text) == getattr(spec(name).features, feature), (name, feature)


def test_build_has_a_flag_for_every_row_option_and_passes_it_to_the_settings(monkeypatch, tmp_path):
    """The CLI's backend flags come from the table: a row's option is a `build` flag whose value reaches
    BuildSettings.backend_options under its setting (what chosen_backend hands the row's preflight)."""
    import click
    from click.testing import CliRunner

    from imagebuild.commands import build as cmd
    from imagebuild.pipeline import flow

    flags = {o.opts[0]: o for o in cmd.command.params if isinstance(o, click.Option)}
    seen: list[dict] = []

    def fake_run(options, say, show):
        seen.append(dict(options.build.backend_options))
        raise UsageError("stop here")

    monkeypatch.setattr(flow, "build_run", fake_run)
    for row in BACKENDS.values():
        for option in row.options:
            assert flags[option.flag].metavar == option.metavar and flags[option.flag].help == option.help
            result = CliRunner().invoke(cmd.command, ["--matrix", "images/cpu.yaml", option.flag, "v1"])
            assert isinstance(result.exception, UsageError) and seen[-1] == {option.setting: "v1"}, result.output
    CliRunner().invoke(cmd.command, ["--matrix", "images/cpu.yaml"])
    assert seen[-1] == {}  # none given: none passed
