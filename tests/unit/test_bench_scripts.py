"""The bench scripts cannot rot: each has a --quick mode, scripts/bench-quick.sh (which CI runs after the linters)
and `make bench` run every one of them, and the benches that need no engine run here, in quick mode, for real."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHES = sorted(p.name for p in (ROOT / "bench").glob("*.py"))
PURE = ("bench_resolve.py", "bench_te.py")  # no engine, no build: cheap enough for the unit tests


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def _make_bench_recipe() -> str:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    match = re.search(r"^bench:.*\n((?:\t.*\n)+)", text, flags=re.M)
    assert match, "the Makefile has no bench target"
    return match.group(1)


def test_there_are_benches():
    assert "bench_resolve.py" in BENCHES and "bench_noop.py" in BENCHES


@pytest.mark.parametrize("name", BENCHES)
def test_bench_has_quick_mode(name):
    proc = _run(f"bench/{name}", "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--quick" in proc.stdout, f"bench/{name} --help names no --quick mode"


@pytest.mark.parametrize("name", BENCHES)
def test_bench_runs_in_ci_and_in_make_bench(name):
    quick = (ROOT / "scripts" / "bench-quick.sh").read_text(encoding="utf-8")
    assert re.search(rf"bench/{re.escape(name)} --quick\b", quick), f"scripts/bench-quick.sh does not run {name}"
    assert f"bench/{name}" in _make_bench_recipe(), f"`make bench` does not run bench/{name}"


def test_ci_runs_the_quick_benches():
    run_tests = (ROOT / "scripts" / "run-tests.sh").read_text(encoding="utf-8")
    lint, quick = run_tests.find("scripts/lint.sh"), run_tests.find("scripts/bench-quick.sh")
    assert 0 <= lint < quick, "scripts/run-tests.sh must run scripts/bench-quick.sh after the linters"


@pytest.mark.parametrize("name", PURE)
def test_pure_bench_quick_runs(name):
    proc = _run(f"bench/{name}", "--quick")
    assert proc.returncode == 0, f"bench/{name} --quick failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr
    assert proc.stdout.strip(), f"bench/{name} --quick printed no table"
