"""Property-based tests of every reader of a file the tool may be handed damaged or hostile: the matrix, the lock, the
record and the build report. For every input: a result, or an ImagebuildError whose message becomes `error:` lines
and a defined exit code (1 or 2), never any other exception (a traceback for the user).

Bounded for CI: IMAGEBUILD_FUZZ_EXAMPLES examples per reader (default 120); derandomized, so a failure reproduces.
"""

from __future__ import annotations

import json
import os
import string
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagebuild.cli import error_lines
from imagebuild.errors import EXIT_BAD_INPUT, EXIT_FAILED, ImagebuildError
from imagebuild.inputs import BuildInputs
from imagebuild.lock import LockError, load, problems
from imagebuild.matrix import find_matrix, parse_matrix
from imagebuild.plan import make_plan
from imagebuild.record import load_record, record_path, updating
from imagebuild.report import load_report, render_junit, render_markdown
from imagebuild.report.stored import ReportError
from imagebuild.report.writer import _history_line
from imagebuild.resolve import resolve_matrix

FUZZ = settings(max_examples=int(os.environ.get("IMAGEBUILD_FUZZ_EXAMPLES", "120")), deadline=None,
                derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.filter_too_much, HealthCheck.data_too_large])


def assert_one_error_form(exc: ImagebuildError) -> None:
    assert exc.exit_code in (EXIT_FAILED, EXIT_BAD_INPUT)
    lines = error_lines(str(exc)).splitlines()
    assert lines and all(ln.startswith("error: ") or ln.startswith((" ", "\t")) for ln in lines), lines
    assert "Traceback" not in str(exc)


def json_values(keys: list[str]) -> st.SearchStrategy:
    """JSON values whose object keys are mostly the ones the reader looks at, so the shape checks are reached."""
    scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | \
        st.text(max_size=20) | st.sampled_from(["built", "failed", "pushed", "sha256:" + "a" * 64, "", "x:y"])
    key = st.sampled_from(keys) | st.text(max_size=8)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) |
                        st.dictionaries(key, inner, max_size=6), max_leaves=25)


def mutated(text_strategy: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A text, cut short or with a few characters replaced (a truncated or hand-damaged file)."""
    @st.composite
    def cut(draw):
        text = draw(text_strategy)
        how = draw(st.sampled_from(["keep", "truncate", "splice"]))
        if how == "truncate" and text:
            return text[: draw(st.integers(0, len(text)))]
        if how == "splice" and text:
            at = draw(st.integers(0, len(text)))
            return text[:at] + draw(st.text(alphabet=string.printable + "&*[]{}:-|>\x00", max_size=6)) + text[at:]
        return text
    return cut()


# -- matrix ----------------------------------------------------------------------------------------------------
MATRIX_KEYS = ["name", "registry", "gpu_archs", "defaults", "matrix", "include", "exclude", "ca_certs", "size_budget",
               "perf_min", "torch", "cuda", "os", "python", "flavors", "pip_packages", "apt_packages", "base_image",
               "mirror", "snapshot", "torch_index_url", "runtime", "dev", "base", "tf32", "transformer_engine"]
SHIPPED = find_matrix("cpu.yaml").read_text()
ALIASES = st.sampled_from([
    "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nmatrix: {torch: *b, cuda: ['12.8'], os: [ubuntu24.04]}\n",
    "name: &n pytorch\nregistry: *n\n", "d: &d {<<: {torch: '2.9.1'}}\ndefaults: *d\n", "x: &x [*x]\n",
])


def matrix_texts() -> st.SearchStrategy[str]:
    dumped = json_values(MATRIX_KEYS).map(lambda v: yaml.safe_dump(v, sort_keys=False))
    return mutated(st.just(SHIPPED) | dumped | ALIASES | st.text(max_size=200))


@FUZZ
@given(text=matrix_texts())
def test_matrix_reader(tmp_path_factory, text):
    base = tmp_path_factory.mktemp("m")
    try:
        resolve_matrix(parse_matrix(text, "m.yaml", base_dir=base))
    except ImagebuildError as exc:
        assert_one_error_form(exc)


# -- lock ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_lock_text():
    from imagebuild.lock import dump
    from imagebuild.lock.model import Lock, LockedImage, PipPin

    plan = make_plan(find_matrix("cpu.yaml"), BuildInputs(torch_index_url="none"), None, use_lock=False)
    images = {i.id: LockedImage(i.id, i.variant.versions.os, i.variant.versions.python, "manylinux_2_28_x86_64",
                                tuple(i.pip_requirements), (PipPin("torch", "2.13.0+cpu", "b" * 64, "torch.whl"),),
                                {p: "1.0" for p in i.apt_packages})
              for i in plan.images}
    return plan, dump(Lock("cpu.yaml", images))


LOCK_KEYS = ["lock_format", "content_sha256", "matrix", "images", "os", "python", "platform", "pip_requires", "pip",
             "apt", "base", "kind", "ref", "digest", "suite", "mirror", "snapshot", "extra_packages", "mirror_state",
             "packages", "name", "version", "sha256", "file"]


@FUZZ
@given(data=st.data())
def test_lock_reader(tmp_path_factory, cpu_lock_text, data):
    plan, good = cpu_lock_text
    dumped = json_values(LOCK_KEYS).map(lambda v: yaml.safe_dump({"lock_format": 1, "images": v}
                                                                 if isinstance(v, dict) else v))
    text = data.draw(mutated(st.just(good) | dumped | ALIASES))
    raw = data.draw(st.sampled_from(["utf-8", "bytes"]))
    path = tmp_path_factory.mktemp("l") / "cpu.lock"
    path.write_bytes(text.encode() if raw == "utf-8" else data.draw(st.binary(max_size=64)) + text.encode())
    try:
        lock = load(path)
    except LockError as exc:
        assert_one_error_form(exc)
        return
    for line in problems(lock, plan.images):
        assert "\n" not in line


# -- record ----------------------------------------------------------------------------------------------------
RECORD_KEYS = ["schema", "tool_version", "updated", "matrix", "matrix_digest", "inputs", "registry", "images", "tests",
               "id", "flavor", "inputs_hash", "parent", "image_id", "status", "tags", "pushes", "sbom", "layers",
               "ca_certs", "pip_extra_index_urls", "pip_index_url", "wheelhouse", "torch_index_url"]


@FUZZ
@given(doc=json_values(RECORD_KEYS), as_record=st.booleans(), cut=st.integers(0, 400))
def test_record_reader(tmp_path_factory, doc, as_record, cut):
    folder = tmp_path_factory.mktemp("r")
    matrix = folder / "cpu.yaml"
    matrix.write_text("name: x\n")
    if as_record and isinstance(doc, dict):
        doc = {"schema": 1, "matrix": str(matrix), **doc}
    text = json.dumps(doc)
    path = record_path(matrix, folder / "state")
    path.parent.mkdir()
    path.write_text(text[:cut] if cut < len(text) and cut % 3 == 0 else text)
    rec = load_record(matrix, folder / "state")  # never raises: a damaged record is said (problem) and replaced
    assert rec is not None
    if rec.problem is None:
        rec.build_inputs()
        rec.describe_inputs()
        json.loads(rec.to_json())
    else:
        assert "\n" not in rec.problem and rec.images == {}
    with updating(matrix, BuildInputs(), None, directory=folder / "state", replace_inputs=True):
        pass
    assert load_record(matrix, folder / "state").problem is None


# -- report ----------------------------------------------------------------------------------------------------
REPORT_KEYS = ["schema", "run", "matrix", "registry", "images", "tag", "flavor", "status", "source", "built_at",
               "image_id", "size", "build_seconds", "tests", "push", "error", "sbom", "diff", "layers", "checks",
               "passed", "failed", "skipped", "seconds", "at", "up_to_date", "digest", "tags", "reason", "path",
               "sha256", "components", "spec", "os", "python", "added", "removed", "changed", "against", "text",
               "steps", "command", "id", "finished", "created_by", "name"]


@FUZZ
@given(doc=json_values(REPORT_KEYS), wrap=st.booleans(), cut=st.integers(0, 300))
def test_report_reader(tmp_path_factory, doc, wrap, cut):
    folder = tmp_path_factory.mktemp("p")
    if wrap:
        doc = {"schema": 2, "run": {"steps": ["build", "test", "push"]},
               "images": [doc if isinstance(doc, dict) else {"tag": "r/x:1", "status": doc}]}
        if isinstance(doc["images"][0], dict):
            doc["images"][0].setdefault("tag", "r/x:1")
    text = json.dumps(doc)
    Path(folder, "build-report.json").write_text(text[:cut] if cut < len(text) and cut % 2 == 0 else text)
    try:
        loaded = load_report(folder)
    except ReportError as exc:
        assert_one_error_form(exc)
        return
    render_markdown(loaded)
    render_junit(loaded)
    json.dumps(_history_line(loaded))
