"""Which backend a build uses and what it records: `auto` resolved once before anything renders (one line says which
and why), a matrix or flag that names a backend left as it is, options that only another backend understands
refused in one line, and records written before the backend was recorded read as the classic builds they were."""

from __future__ import annotations

from dataclasses import replace

import pytest
from _support import image

from imagebuild.backends import BACKENDS, choices
from imagebuild.errors import UsageError
from imagebuild.inputs import BuildInputs
from imagebuild.models import Plan
from imagebuild.pipeline import building
from imagebuild.pipeline.loaded import same_inputs
from imagebuild.pipeline.settings import BuildSettings

MATRIX = """\
name: pytorch-cpu
defaults: {{os: debian12, python: '3.11', cuda: cpu{backend}}}
matrix: {{torch: ['2.13.0']}}
"""


@pytest.fixture
def matrix(tmp_path):
    def write(backend: str | None = None):
        path = tmp_path / "m.yaml"
        path.write_text(MATRIX.format(backend=f", backend: {backend}" if backend else ""))
        return path
    return write


@pytest.fixture
def probed(monkeypatch):
    """choose_auto answering BuildKit; `probed.calls` counts the probes."""
    calls: list[int] = []

    def fake() -> tuple[str, str]:
        calls.append(1)
        return "buildkit", "backend auto: dockerd 26.1.5 with buildx 0.13.1; building with BuildKit"

    monkeypatch.setattr(building, "choose_auto", fake)
    return calls


def test_the_table_names_every_choice_once():
    assert choices() == ["auto", "classic", "buildkit"]
    assert BACKENDS["buildkit"].features.build_secrets and not BACKENDS["classic"].features.build_secrets


def test_auto_is_resolved_to_a_concrete_backend_and_said(matrix, probed):
    said: list[str] = []
    for given in (BuildInputs(), BuildInputs(backend="auto")):
        inputs = building.concrete_backend(matrix(), given, BuildSettings(), said.append)
        assert inputs.backend == "buildkit" and inputs.public()["backend"] == "buildkit"  # recorded: never auto
    assert said == ["backend auto: dockerd 26.1.5 with buildx 0.13.1; building with BuildKit"] * 2
    inputs = building.concrete_backend(matrix("auto"), BuildInputs(), BuildSettings(), said.append)
    assert inputs.backend == "buildkit" and len(probed) == 3


def test_a_named_backend_is_not_probed(matrix, probed):
    said: list[str] = []
    assert building.concrete_backend(matrix("classic"), BuildInputs(), BuildSettings(), said.append).backend is None
    assert building.concrete_backend(matrix(), BuildInputs(backend="classic"), BuildSettings(),
                                     said.append).backend == "classic"
    assert not probed and not said


def test_under_auto_an_option_of_one_backend_chooses_it(matrix, probed):
    said: list[str] = []
    inputs = building.concrete_backend(matrix(), BuildInputs(), BuildSettings(backend_options={"builder": "farm"}), said.append)
    assert inputs.backend == "buildkit" and not probed
    assert said == ["backend auto: --builder given; building with BuildKit"]


def test_an_option_of_another_backend_is_refused_in_one_line():
    """chosen_backend decides before any preflight or engine question (flow.build_run, then backend_maker)."""
    plan = Plan("m.yaml", [image("a", "base", None)])  # its variant names the classic builder
    for settings, flags in ((BuildSettings(backend_options={"builder": "farm"}), "--builder"),
                            (BuildSettings(backend_options={"buildkit_cache": "reg/cache"}), "--buildkit-cache"),
                            (BuildSettings(backend_options={"builder": "farm", "buildkit_cache": "r/c"}), "--builder and --buildkit-cache")):
        with pytest.raises(UsageError) as err:
            building.chosen_backend(plan, BuildInputs(), settings)
        assert str(err.value) == (f"{flags}: only the buildkit backend understands "
                                  f"{'them' if ' and ' in flags else 'it'}, and this build renders for and builds "
                                  f"with classic; choose --backend buildkit or drop {flags}")
        assert "\n" not in str(err.value)
    name, own = building.chosen_backend(plan, BuildInputs(backend="buildkit"),
                                        BuildSettings(backend_options={"builder": "farm"}))
    assert name == "buildkit" and own == {"builder": "farm", "buildkit_cache": None}  # what its preflight gets
    name, own = building.chosen_backend(plan, BuildInputs(), BuildSettings())
    assert name == "classic" and own == {}


def test_a_record_from_before_backends_were_recorded_is_a_classic_build():
    assert same_inputs(BuildInputs().public(), BuildInputs(backend="classic"))
    assert same_inputs(BuildInputs(backend="classic").public(), BuildInputs(backend="classic"))
    assert not same_inputs(BuildInputs().public(), BuildInputs(backend="buildkit"))
    assert not same_inputs(BuildInputs(backend="classic").public(), BuildInputs())
    assert not same_inputs(replace(BuildInputs(), torch_index_url="none").public(), BuildInputs(backend="classic"))


def test_plan_and_test_read_the_backend_the_record_names(matrix, tmp_path):
    """An old record (no backend) plans as the classic build it was; a record of an auto build as what auto chose;
    `--backend auto` on a command that does not build means "as recorded"."""
    from imagebuild.backends import plan_backend
    from imagebuild.pipeline.loaded import load
    from imagebuild.record import updating

    path = matrix()
    said: list[str] = []
    loaded = load(str(path), None, None, None, said.append)
    assert plan_backend(loaded.plan, loaded.inputs) == "classic"  # no record: as rendered offline
    with updating(path, BuildInputs(), None):
        pass
    loaded = load(str(path), None, BuildInputs(backend="auto"), None, said.append)
    assert plan_backend(loaded.plan, loaded.inputs) == "classic" and not said
    with updating(path, BuildInputs(backend="buildkit"), None, replace_inputs=True):
        pass
    loaded = load(str(path), None, None, None, said.append)
    assert plan_backend(loaded.plan, loaded.inputs) == "buildkit"
    assert said == [f"inputs from {loaded.record.path}: --backend buildkit"]


def test_plan_says_which_backend_auto_was_planned_as_when_nothing_names_one(matrix):
    """The backend renders its own Dockerfiles: the hashes `plan` shows are one backend's, and the line says whose."""
    from click.testing import CliRunner

    from imagebuild.commands import plan as cmd
    from imagebuild.record import updating

    path = matrix()

    def planned(*args: str) -> str:
        result = CliRunner().invoke(cmd.command, ["--matrix", str(path), "--json", *args])
        assert result.exit_code == 0, result.output
        return result.output

    line = ("backend auto: no record or flag names it; the hashes shown are for the classic builder (planning asks "
            "no engine; a build on Docker Engine >= 23 with buildx uses BuildKit: --backend buildkit shows its hashes)")
    assert line in planned() and line in planned("--backend", "auto")
    assert "backend auto" not in planned("--backend", "buildkit")
    with updating(path, BuildInputs(backend="buildkit"), None, replace_inputs=True):
        pass
    assert "backend auto" not in planned()  # the record names it
    path.write_text(MATRIX.format(backend=", backend: classic"))
    assert "backend auto" not in planned("--backend", "classic")
