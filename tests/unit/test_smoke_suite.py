"""The suite's tests come from the probe's table (suite/test_checks.py): the real suite, run on this host
(`--hosts=local://`) with a stand-in probe zipapp (`--probe-pyz`) that reports what each case needs for the
sections it is asked for. One test per check row; a reported check no row names fails the run, and so does a row
the probe never reports; a GPU row skipped for want of a GPU fails under --require-gpu; a side container that did
not start fails its checks with the reason; a check a hand-written test claims has that one test only."""

from __future__ import annotations

import json
import subprocess
import sys
import zipapp
from pathlib import Path

import pytest

from imagebuild.smoke import probe as P
from imagebuild.smoke.runner import SUITE_DIR

# the stand-in probe: every row of the asked sections, with the statuses CASE gives (default passed, a GPU row
# skipped for want of a GPU), minus CASE["missing"], plus CASE["extra"]; the facts the value tests read are not here
FAKE_MAIN = """\
import json, sys
case = json.loads({case!r})
rows = json.loads({rows!r})
args = sys.argv[1:]
sections = args[args.index("--sections") + 1].split(",")
checks = []
for name, gpu in rows:
    if name.split(".")[0] in sections and name not in case["missing"]:
        status, reason = case["status"].get(name) or (("skipped", {no_gpu!r}) if gpu else ("passed", ""))
        checks.append({{"name": name, "section": name.split(".")[0], "status": status, "reason": reason,
                       "figures": {{}}}})
checks += [c for c in case["extra"] if c["section"] in sections]
print(json.dumps({{"probe": {{"version": 1, "sections": sections, "errors": []}}, "checks": checks}}))
"""


def _fake_pyz(tmp_path: Path, case: dict) -> Path:
    src = tmp_path / "fake"
    src.mkdir(parents=True)
    rows = json.dumps([[c.name, c.gpu] for c in P.CHECKS])
    (src / "__main__.py").write_text(FAKE_MAIN.format(case=json.dumps(case), rows=rows, no_gpu=P.NO_GPU))
    target = tmp_path / "fake.pyz"
    zipapp.create_archive(src, target)
    return target


def _suite(tmp_path: Path, case: dict, *args: str) -> tuple[int, dict[str, dict]]:
    """Run the suite's generated tests against the stand-in probe: (pytest's exit code, {result name: row})."""
    case = {"status": {}, "missing": [], "extra": [], **case}
    out = subprocess.run([sys.executable, "-m", "pytest", str(SUITE_DIR / "test_checks.py"), "-c",
                          str(SUITE_DIR / "pytest.ini"), "--rootdir", str(SUITE_DIR), "-p", "no:cacheprovider", "-q",
                          "--hosts=local://", "--probe-python", sys.executable, "--probe-pyz",
                          str(_fake_pyz(tmp_path, case)), "--smoke-json", str(tmp_path / "r.json"), *args],
                         capture_output=True, text=True, timeout=300, cwd=str(SUITE_DIR))
    assert (tmp_path / "r.json").exists(), out.stdout[-3000:] + out.stderr[-3000:]
    rows = json.loads((tmp_path / "r.json").read_text())["checks"]
    return out.returncode, {r["name"]: r for r in rows}


def test_every_row_is_one_test_and_a_complete_probe_passes(tmp_path):
    rc, rows = _suite(tmp_path, {}, "--flavor", "runtime", "--side-error", "hpc=the image did not start")
    applies = {c.name for c in P.checks_for("runtime")}
    checks = {n for n in rows if "/" not in n}
    assert checks == applies, checks ^ applies  # one test per row of the flavor, named as the probe names it
    failed = {n: r["reason"] for n, r in rows.items() if r["status"] == "failed"}
    assert set(failed) == {c.name for c in P.CHECKS if c.where == P.HPC and c.name in applies}, failed
    assert all(r.startswith("hpc probe (not run): the image did not start") for r in failed.values()), failed
    assert rows["gpu.available"]["status"] == "skipped" and rows["gpu.available"]["reason"] == P.NO_GPU
    # not wired (a plain run by hand): the arbitrary-UID checks skip, saying how to wire them
    assert rows["uid.tmp_writable"]["status"] == "skipped" and "--side arbitrary-uid=" in rows["uid.tmp_writable"][
        "reason"]
    assert rows["checks/reported_checks_have_rows[image-user]"]["status"] == "passed"
    assert rows["checks/reported_checks_have_rows[root]"]["status"] == "passed"
    assert rc == 1
    rc, rows = _suite(tmp_path / "base", {}, "--flavor", "base")
    assert rc == 0 and not any(n.startswith(("gpu.", "hpc.", "dev.", "perf.")) for n in rows)
    assert rows["pip.check"]["status"] == "passed" and rows["hygiene.tmp"]["status"] == "passed"


def test_unclaimed_and_unreported_checks_fail(tmp_path):
    unknown = {"name": "locale.new_thing", "section": "locale", "status": "passed", "reason": "", "figures": {}}
    crashed = {"name": "pip.probe", "section": "pip", "status": "failed", "reason": "probe section crashed: boom",
               "figures": {}}
    rc, rows = _suite(tmp_path / "b", {"missing": ["ldd.resolve"], "extra": [unknown, crashed],
                                       "status": {"hygiene.tmp": ["failed", "files left in /tmp: /tmp/x"]}},
                      "--flavor", "base", "--side-error", "arbitrary-uid=the image did not start as 12345:0: no")
    failed = {n: r["reason"] for n, r in rows.items() if r["status"] == "failed"}
    assert rc == 1
    assert set(failed) == {"checks/reported_checks_have_rows[image-user]", "ldd.resolve", "hygiene.tmp",
                           "uid.home_writable", "uid.tmp_writable", "uid.torch_import"}, failed
    assert "locale.new_thing (passed" in failed["checks/reported_checks_have_rows[image-user]"]
    assert "pip.probe (failed: probe section crashed: boom)" in failed["checks/reported_checks_have_rows[image-user]"]
    assert failed["ldd.resolve"].startswith("the image-user probe reported no 'ldd.resolve' check")
    assert failed["hygiene.tmp"] == "hygiene.tmp: files left in /tmp: /tmp/x"
    assert "the image did not start as 12345:0" in failed["uid.tmp_writable"]


def test_require_gpu_fails_a_gpu_row_skipped_for_want_of_a_gpu(tmp_path):
    rc, rows = _suite(tmp_path, {}, "--flavor", "runtime", "--require-gpu", "-k", "gpu or amp")
    assert rows["gpu.available"]["status"] == "failed" and rows["gpu.available"]["reason"] == f"{P.NO_GPU} " \
        "(--require-gpu)"
    assert rows["amp.cuda_bf16"]["status"] == "failed" and rows["amp.cpu_bf16"]["status"] == "passed"


@pytest.mark.parametrize("flavor", P.FLAVORS)
def test_each_check_has_exactly_one_test_per_flavor(flavor):
    """Collected (no probe run): the generated tests plus the hand-written ones claiming a check cover each row that
    applies, once; a claimed row's generated test is not collected."""
    out = subprocess.run([sys.executable, "-m", "pytest", str(SUITE_DIR), "-c", str(SUITE_DIR / "pytest.ini"),
                          "--rootdir", str(SUITE_DIR), "-p", "no:cacheprovider", "--collect-only", "-q",
                          "--hosts=local://", "--flavor", flavor, "--perf"],
                         capture_output=True, text=True, timeout=120, cwd=str(SUITE_DIR))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    generated = [i.split("[", 1)[1].rsplit("-", 1)[0] for i in ids if "::test_check[" in i]
    claimed = {"tf32.accuracy": "test_tf32.py::test_tf32_accuracy", "te.import": "test_te.py::test_te_import",
               "uid.home_writable": "test_arbitrary_uid.py::test_arbitrary_uid_home_writable",
               "hpc.te": "test_hpc_runtime.py::test_hpc_te",
               "coverage.kernels": "test_coverage.py::test_kernel_coverage",
               "cudalibs.nccl_version": "test_cudalibs.py::test_nccl_version_is_the_pinned_one"}
    claimed.update({f"perf.{k}": f"test_perf.py::test_perf[local-{k}]"
                    for k in ("gemm_fp32", "gemm_tf32", "gemm_bf16", "allreduce")})
    applies = [c.name for c in P.checks_for(flavor, opt_in=True)]
    assert len(generated) == len(set(generated))
    assert set(generated) == set(applies) - set(claimed), set(generated) ^ (set(applies) - set(claimed))
    for name in set(applies) & set(claimed):
        assert any(i.startswith(claimed[name]) for i in ids), (name, claimed[name])
