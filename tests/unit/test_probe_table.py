"""The one table of in-image checks (smoke/probe/table.py): the probe's dispatch and the suite's selection come from
its rows, every section row has its probe module, and every check row's test is generated (tests/unit/
test_smoke_suite.py runs them)."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.smoke import probe as P
from imagebuild.smoke.probe import __main__ as probe_main

SUITE = Path(P.__file__).resolve().parent.parent / "suite"


def _suite_sections() -> dict[str, str]:
    """{hand-written suite test file: the section its `pytestmark = pytest.mark.section(NAME)` names}."""
    out = {}
    for path in sorted(SUITE.glob("test_*.py")):
        if path.name == "test_checks.py":  # generated from the table's checks: no section of its own
            continue
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
    for c in P.CHECKS:
        assert c.section in P.SECTIONS and c.name.count(".") == 1, c
        assert c.only_from is None or P.FLAVORS.index(c.only_from) > P.FLAVORS.index(P.section(c.section).flavor), c
    assert len({c.name for c in P.CHECKS}) == len(P.CHECKS)
    assert P.check_row("amp.cpu_bf16").flavor == "runtime" and P.check_row("hpc.jupyter").flavor == "dev"
    assert P.check_row("uid.torch_import").where == P.ARBITRARY_UID and P.check_row("gpu.available").gpu
    assert P.check_row("amp.nope") is None
    assert set(P.SIDE_CONTAINERS) == {P.ARBITRARY_UID, P.HPC}


def test_every_name_a_probe_module_reports_is_a_row():
    """A literal `SECTION.name` in a section's module is a check it reports: each has its row (the suite fails a
    run whose probe reports one without; this finds it before an image is built)."""
    for row in P.TABLE:
        source = Path(importlib.import_module(f"probe.{row.module}").__file__).read_text()
        names = {n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant)
                 and isinstance(n.value, str) and re.fullmatch(rf"{row.name}\.[a-z0-9_]*[a-z0-9]", n.value)}
        assert names <= {c.name for c in P.CHECKS}, (row.module, names - {c.name for c in P.CHECKS})


def test_dispatch_is_derived_from_the_table():
    assert list(probe_main.runners()) == list(P.SECTIONS)
    assert probe_main.runners()["ldd"] is importlib.import_module("probe.sharedlibs").run
    assert set(probe_main.CHILD_SECTIONS) == {"te", "compile", "release"}
    assert probe_main.child_runner("compile") is importlib.import_module("probe.torch_compile").child


def test_every_suite_file_names_a_section():
    by_file = _suite_sections()
    assert set(by_file.values()) <= set(P.SECTIONS), set(by_file.values()) - set(P.SECTIONS)
    assert by_file["test_runtime_contract.py"] == "system" and by_file["test_arbitrary_uid.py"] == "uid"


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
    out = subprocess.run([sys.executable, str(P.zipapp_path()), "--list-checks"], capture_output=True, text=True,
                         timeout=60)
    checks = json.loads(out.stdout)
    assert [c["name"] for c in checks] == [c.name for c in P.CHECKS]
    assert next(c for c in checks if c["name"] == "hpc.cuda") == {
        "name": "hpc.cuda", "section": "hpc", "flavor": "runtime", "where": "hpc", "gpu": True, "opt_in": False}


def _collect(*args: str) -> list[str]:
    """The checks a collection tests: each generated test's row, and `file::test` for the other tests."""
    out = []
    for line in _collect_ids(*args):
        row = re.search(r"::test_check\[([a-z0-9_]+\.[a-z0-9_]+)-", line)
        out.append(row.group(1) if row else line.split("[")[0])
    return out


def test_suite_selects_tests_by_the_tables_flavor():
    base = set(_collect("--flavor", "base"))
    assert {"ldd.resolve", "hygiene.tmp", "uid.tmp_writable", "pip.check"} <= base
    assert not [n for n in base if n.startswith(("gpu.", "amp.", "dev.", "perf.", "hpc."))]
    dev = set(_collect("--flavor", "dev"))
    assert {"gpu.available", "dev.jupyter", "te.fp8", "hpc.jupyter"} <= dev and "test_perf.py::test_perf" not in dev
    assert "hpc.jupyter" not in set(_collect("--flavor", "runtime"))
    # the perf rows: opt-in, each claimed by test_perf (its floor from perf_min)
    assert "test_perf.py::test_perf" in set(_collect("--flavor", "runtime", "--perf")) - set(
        _collect("--flavor", "runtime"))


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
