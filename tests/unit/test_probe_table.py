"""The one table of in-image checks (smoke/probe/table.py): the probe's dispatch and the suite's selection come from
its rows, and every row has its probe module and its suite test file."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.smoke import probe as P
from imagebuild.smoke.probe import __main__ as probe_main

SUITE = Path(P.__file__).resolve().parent.parent / "suite"


def _suite_sections() -> dict[str, str]:
    """{suite test file: the section its `pytestmark = pytest.mark.section(NAME)` names}."""
    out = {}
    for path in sorted(SUITE.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
                call = node.value
                assert isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "section", path.name
                out[path.name] = call.args[0].value  # type: ignore[attr-defined]
        assert path.name in out, f"{path.name}: no pytestmark = pytest.mark.section(NAME)"
    return out


def test_every_row_has_its_module_and_valid_fields():
    for row in P.TABLE:
        mod = importlib.import_module(f"probe.{row.module}")
        assert callable(mod.run), row
        assert callable(getattr(mod, "child", None)) == row.child, row
        assert row.flavor in P.FLAVORS and row.where in P.WHERE, row
    assert len({r.name for r in P.TABLE}) == len(P.TABLE)


def test_dispatch_is_derived_from_the_table():
    assert list(probe_main.runners()) == list(P.SECTIONS)
    assert probe_main.runners()["ldd"] is importlib.import_module("probe.sharedlibs").run
    assert set(probe_main.CHILD_SECTIONS) == {"te", "compile", "release"}
    assert probe_main.child_runner("compile") is importlib.import_module("probe.torch_compile").child


def test_every_section_has_exactly_its_suite_files():
    by_file = _suite_sections()
    assert set(by_file.values()) == set(P.SECTIONS), set(P.SECTIONS) ^ set(by_file.values())
    assert by_file["test_shared_libraries.py"] == "ldd" and by_file["test_hygiene.py"] == "hygiene"


def test_selection_by_flavor_and_where():
    base = P.sections_for("base")
    assert "gpu" not in base and "dev" not in base and {"system", "ldd", "libraries"} <= set(base)
    assert "hygiene" not in base and "uid" not in base  # they run apart
    assert "dev" in P.sections_for("dev") and "dev" not in P.sections_for("runtime")
    assert P.sections_for("base", P.ROOT) == ("hygiene",)
    assert P.sections_for("dev", P.ARBITRARY_UID) == ("uid",)
    assert P.sections_for("base", P.HPC) == () and P.sections_for("runtime", P.HPC) == ("hpc",)
    assert "perf" not in P.sections_for("dev") and "perf" in P.sections_for("runtime", opt_in=True)
    assert "perf" not in P.DEFAULT_SECTIONS and "dev" not in P.DEFAULT_SECTIONS and "hygiene" in P.DEFAULT_SECTIONS
    with pytest.raises(KeyError, match="unknown section 'nope'; valid: system"):
        P.section("nope")


def test_list_sections_prints_the_table():
    out = subprocess.run([sys.executable, str(P.zipapp_path()), "--list-sections"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["name"] for r in rows] == list(P.SECTIONS)
    assert rows[1] == {"name": "hygiene", "module": "hygiene", "flavor": "base", "where": "root", "child": False,
                       "opt_in": False}


def _collect(*args: str) -> list[str]:
    return [line.split("::")[0] for line in _collect_ids(*args)]


def test_suite_selects_files_by_the_tables_flavor():
    base = set(_collect("--flavor", "base"))
    assert "test_shared_libraries.py" in base and "test_hygiene.py" in base and "test_arbitrary_uid.py" in base
    assert not base & {"test_gpu.py", "test_amp.py", "test_dev.py", "test_perf.py"}
    dev = set(_collect("--flavor", "dev"))
    assert {"test_gpu.py", "test_dev.py", "test_te.py"} <= dev and "test_perf.py" not in dev
    assert "test_perf.py" in set(_collect("--flavor", "runtime", "--perf"))


def _collect_ids(*args: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", str(SUITE), "-c", str(SUITE / "pytest.ini"), "--rootdir",
                          str(SUITE), "-p", "no:cacheprovider", "--collect-only", "-q", "--hosts=local://", *args],
                         capture_output=True, text=True, timeout=120, cwd=str(SUITE))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_a_tests_own_flavor_narrows_its_section():
    """The base-flavor `versions` section checks python and os on a base image; torch and the CUDA libraries
    (`pytest.mark.flavor("runtime")`) only from the runtime up: a base image has none of them."""
    base = [i for i in _collect_ids("--flavor", "base") if i.startswith("test_versions.py")]
    runtime = [i for i in _collect_ids("--flavor", "runtime") if i.startswith("test_versions.py")]
    assert any("test_python" in i for i in base) and not any("test_version[" in i for i in base)
    assert any("test_version[" in i and "torch]" in i for i in runtime)
