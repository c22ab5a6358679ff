"""The plan cache (plan/cache.py): an unchanged matrix plans from the cache; any change to what the plan was made
from (the matrix, a CA file, the arguments) plans again; credentials are never written; a broken entry is a miss."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.inputs import BuildInputs
from imagebuild.matrix import find_matrix
from imagebuild.plan import cache, make_plan

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("IMAGEBUILD_NO_PLAN_CACHE", raising=False)


@pytest.fixture
def matrix(tmp_path) -> Path:
    path = tmp_path / "cpu.yaml"
    path.write_text(find_matrix("cpu.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    return path


def _entries(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "plans").glob("*.pickle"))


def _hashes(plan) -> list[str]:
    return [i.inputs_hash for i in plan.images]


def test_unchanged_inputs_plan_from_the_cache(matrix, tmp_path):
    first = make_plan(matrix, BuildInputs())
    assert len(_entries(tmp_path)) == 1
    again = make_plan(matrix, BuildInputs())
    assert again == first and again is not first


def test_a_hit_loads_neither_the_templates_nor_the_yaml_matrix(matrix):
    make_plan(matrix, BuildInputs())
    code = ("import sys; from pathlib import Path; from imagebuild.inputs import BuildInputs; "
            "from imagebuild.plan.cache import load; "
            f"p = load(Path({str(matrix)!r}), BuildInputs(), None, Path('rendered/cpu'), True); "
            "print(p is not None, 'jinja2' in sys.modules, 'imagebuild.resolve' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path.cwd(),
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")}).stdout.split()
    assert out == ["True", "False", "False"]


def test_a_matrix_edit_of_the_same_size_plans_again(matrix):
    before = make_plan(matrix, BuildInputs())
    text = matrix.read_text(encoding="utf-8")
    matrix.write_text(text.replace("tf32: false", "tf32: true "), encoding="utf-8")  # same length, same tick
    after = make_plan(matrix, BuildInputs())
    assert _hashes(after) != _hashes(before)
    assert all(i.variant.tf32 for i in after.images)


def test_a_ca_file_edit_plans_again(matrix, tmp_path):
    ca = tmp_path / "corp.pem"
    ca.write_bytes((ROOT / "tests/unit/fixtures/matrices/corp-ca.pem").read_bytes())
    before = make_plan(matrix, BuildInputs(ca_certs=(ca,)))
    ca.write_bytes(ca.read_bytes().replace(b"CERTIFICATE-----\n", b"CERTIFICATE-----\nB", 1)[:-1])
    after = make_plan(matrix, BuildInputs(ca_certs=(ca,)))
    assert _hashes(after)[0] != _hashes(before)[0]


def test_other_arguments_plan_again(matrix):
    local = make_plan(matrix, BuildInputs(), registry="")
    other = make_plan(matrix, BuildInputs(torch_index_url="none"), registry="")
    assert _hashes(local) != _hashes(other)
    assert make_plan(matrix, BuildInputs(), registry="reg.example:5000/x").images[0].tag.startswith("reg.example")


def test_credentials_are_never_written(matrix, tmp_path):
    secret = "Pa55w0rdXYZ"
    plan = make_plan(matrix, BuildInputs(pip_index_url=f"https://u:{secret}@pypi.corp.example/simple"))
    assert any(i.secret_build_args for i in plan.images)
    assert _entries(tmp_path) == []


def test_switched_off(matrix, tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_NO_PLAN_CACHE", "1")
    make_plan(matrix, BuildInputs())
    assert _entries(tmp_path) == []


def test_a_broken_entry_is_a_miss(matrix, tmp_path):
    first = make_plan(matrix, BuildInputs())
    [entry] = _entries(tmp_path)
    entry.write_bytes(b"not a pickle")
    assert make_plan(matrix, BuildInputs()) == first
    entry.write_bytes(pickle.dumps({"arguments": "x"}))
    assert cache.load(matrix, BuildInputs(), None, Path("rendered/cpu"), True) is None
