"""Run the probe for real on this host: with plain python (no torch), and with a CPU torch venv when one exists.

What runs is what the smoke suite ships: the one-file zipapp built from the package (P.zipapp_path()).

The torch python: the `torch_python` fixture (tests/unit/_torch_venv.py: a venv with the CPU wheel, made once).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagebuild.smoke import probe as P

PROBE = P.zipapp_path()
PKG_PARENT = Path(P.__file__).resolve().parent.parent  # the directory holding probe/


def _run(python, *args, timeout=300):
    out = subprocess.run([python, str(PROBE), *args], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout), out


def _checks(doc):
    return {c["name"]: c for c in doc["checks"]}


def test_probe_without_torch_prints_one_json_document(tmp_path):
    env_py = sys.executable
    doc, out = _run(env_py, "--sections", "system,libraries,tf32,amp", "--output", str(tmp_path / "p.json"))
    assert out.stdout.count("\n") == 1  # exactly one line: the JSON
    assert json.loads((tmp_path / "p.json").read_text()) == doc
    assert doc["probe"]["sections"] == ["system", "libraries", "tf32", "amp"]
    s = doc["system"]
    assert s["user"]["uid"] == os.getuid() and s["python"]["version"]
    assert set(s["env"]["nvidia"]) == set(P.NVIDIA_ENV)
    c = _checks(doc)
    if not doc.get("torch_import", {}).get("error"):
        pytest.skip("this interpreter has torch")
    assert c["amp.cpu_bf16"]["status"] == "skipped" and c["amp.cpu_bf16"]["reason"] == P.NO_TORCH
    for ch in doc["checks"]:
        assert ch["status"] in ("passed", "failed", "skipped") and "reason" in ch and "figures" in ch


def test_probe_secret_env_reports_names_only():
    env = dict(os.environ, IB_TEST_PASSWORD="do-not-print-me", IB_PROXY="http://u:pw-secret@proxy:3128")
    out = subprocess.run([sys.executable, str(PROBE), "--sections", "system"], capture_output=True, text=True,
                         env=env, timeout=60)
    doc = json.loads(out.stdout)
    names = [f["name"] for f in doc["system"]["env"]["secret_names"]]
    assert "IB_TEST_PASSWORD" in names and "IB_PROXY" in names
    assert "do-not-print-me" not in out.stdout and "pw-secret" not in out.stdout


def test_probe_rejects_unknown_section():
    out = subprocess.run([sys.executable, str(PROBE), "--sections", "nope"], capture_output=True, text=True)
    assert out.returncode == 2 and "unknown section" in out.stderr


def test_probe_table_mode(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"probe": {"seconds": 1}, "checks": [{"name": "x.y", "status": "passed", "reason": "r"}]}))
    out = subprocess.run([sys.executable, str(PROBE), "--table", str(f)], capture_output=True, text=True)
    assert "x.y" in out.stdout and "1 passed" in out.stdout


def test_probe_cpu_torch(torch_python):
    doc, _ = _run(torch_python, "--sections", "system,versions,libraries,gpu,tf32,amp,distributed,te", "--timeout", "240")
    c = _checks(doc)
    assert doc["versions"]["torch"].startswith("2.") and doc["probe"]["errors"] == []
    assert c["amp.cpu_bf16"]["status"] == "passed", c["amp.cpu_bf16"]
    assert c["amp.cpu_bf16"]["figures"]["mode"] == "cpu-bf16"
    assert c["amp.cpu_bf16"]["figures"]["autocast_dtype"] == "torch.bfloat16"
    assert c["amp.cpu_bf16"]["figures"]["last_loss"] < c["amp.cpu_bf16"]["figures"]["first_loss"]
    assert c["distributed.gloo"]["status"] == "passed", c["distributed.gloo"]
    assert c["distributed.gloo"]["figures"]["backend"] == "gloo"
    assert c["distributed.gloo"]["figures"]["world_size"] == 2
    assert c["tf32.policy"]["status"] == "passed"
    assert {"matmul_allow_tf32", "matmul_fp32_precision", "float32_matmul_precision"} <= set(doc["tf32_at_import"])
    if not doc["versions"]["cuda"]:
        for name in ("gpu.available", "amp.cuda_fp16", "amp.cuda_bf16", "distributed.nccl", "tf32.speedup"):
            assert c[name]["status"] == "skipped" and c[name]["reason"].startswith(P.NO_GPU), name
    assert not [x for x in doc["checks"] if x["status"] == "failed"]
    # what the probe reports is exactly the table's rows of the sections it ran (the suite's one test per row)
    rows = {r.name for r in P.CHECKS if r.section in doc["probe"]["sections"]}
    assert set(c) == rows, set(c) ^ rows


def _left_behind(marker: str) -> list[str]:
    """The command lines of live processes that name `marker` (a probe's zipapp path: its forkserver's and children's
    command lines carry it)."""
    out = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(ln for ln in (proc / "status").read_text().splitlines() if ln.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if marker in cmd and "zombie" not in state:
            out.append(f"{proc.name}: {cmd[:200]}")
    return out


def test_probe_watchdog_emits_partial_json_and_leaves_nothing_behind(torch_python, tmp_path):
    py = torch_python
    # a probe of its own (its path names its processes): 1 s is not enough for the gloo workers, and the forkserver
    # is still importing torch when the watchdog fires; the watchdog must still print a JSON document, marked timed
    # out, and end: the forkserver and the rank it was about to fork die with the probe (probe/lifeline.py), so
    # nothing holds the probe's output open (before, this run waited for ever) and no process stays behind
    probe = tmp_path / "watchdog-probe.pyz"
    probe.write_bytes(PROBE.read_bytes())
    out = subprocess.run([py, str(probe), "--sections", "versions,distributed", "--timeout", "1"],
                         capture_output=True, text=True, timeout=120)
    doc = json.loads(out.stdout)
    assert out.returncode == 3 and doc["probe"]["timed_out"] is True
    assert any("timed out" in e for e in doc["probe"]["errors"])
    left = _left_behind(str(probe))
    for _ in range(50):  # SIGKILL is delivered at once, the exit of a process torch has loaded a little later
        if not left:
            break
        time.sleep(0.1)
        left = _left_behind(str(probe))
    assert not left, left


def test_probe_te_import_failure_is_reported(tmp_path):
    """A TE that is installed but does not import (BRIEF: cudart loader mismatch) fails te.import with the reason."""
    pkg = tmp_path / "transformer_engine"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('cudart shared object not found')\n")
    info = tmp_path / "transformer_engine-2.12.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: transformer_engine\nVersion: 2.12.0\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    out = subprocess.run([sys.executable, str(PROBE), "--sections", "te"], capture_output=True, text=True, env=env,
                         timeout=120)
    doc = json.loads(out.stdout)
    c = _checks(doc)
    assert doc["te"]["installed"] == "2.12.0"
    assert c["te.import"]["status"] == "failed" and "cudart shared object not found" in c["te.import"]["reason"]
    assert c["te.fp8"]["status"] == "skipped"


def test_probe_runs_nvidia_smi_from_path(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   "if [ \"$1\" = -L ]; then\n"
                   "echo 'GPU 0: NVIDIA H200 (UUID: GPU-aa11bb22-cc33-dd44-ee55-ff6677889900)'\n"
                   "echo '  MIG 1g.18gb     Device  0: (UUID: MIG-00000000-1111-2222-3333-444444444444)'\n"
                   "else echo 570.86.15; fi\n")
    smi.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    out = subprocess.run([sys.executable, str(PROBE), "--sections", "gpu"], capture_output=True, text=True, env=env,
                         timeout=120)
    g = json.loads(out.stdout)["gpu"]
    assert g["nvidia_smi"]["gpu_count"] == 1 and g["nvidia_smi"]["mig_count"] == 1
    assert g["nvidia_smi"]["gpus"][0]["mig"][0]["profile"] == "1g.18gb"
    assert g["driver"] == "570.86.15"


def test_probe_zipapp_is_one_file_with_the_package():
    import zipfile

    names = zipfile.ZipFile(PROBE).namelist()
    assert "__main__.py" in names and "probe/__main__.py" in names and "probe/distributed.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert P.zipapp_path() == PROBE  # built once per process


def test_probe_runs_from_the_package_files_without_imagebuild(tmp_path):
    """`python -m probe` with only the package's parent on PYTHONPATH (gpu-probe.sh's files-only case)."""
    env = dict(os.environ, PYTHONPATH=str(PKG_PARENT))
    out = subprocess.run([sys.executable, "-c", "import sys, runpy; runpy.run_module('probe', run_name='__main__'); "
                          "sys.exit(0)", "--sections", "system"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["probe"]["sections"] == ["system"]
    out = subprocess.run([sys.executable, "-m", "probe", "--sections", "system"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120)
    assert out.returncode == 0 and json.loads(out.stdout)["system"]["python"]["version"], out.stderr[-2000:]
    assert "imagebuild" not in out.stderr


def test_probe_children_run_from_the_zipapp_and_the_files(tmp_path, torch_python):
    """Child probes (gloo ranks, the TE child) re-run the same code: `python probe.pyz ...` from a zipapp,
    `python -c BOOT <parent> ...` from the files."""
    env = dict(os.environ, PYTHONPATH=str(PKG_PARENT))
    code = "import json, probe.common as c; print(json.dumps(c.child_argv(['--te-child'])))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    argv = json.loads(out.stdout)
    assert argv[0] == sys.executable and argv[1] == "-c" and argv[3:] == [str(PKG_PARENT), "--te-child"]
    py = torch_python
    for cmd, e in (([py, str(PROBE)], dict(os.environ)), ([py, "-m", "probe"], env)):
        out = subprocess.run(cmd + ["--sections", "distributed", "--timeout", "240"], capture_output=True,
                             text=True, env=e, cwd=tmp_path, timeout=300)
        c = _checks(json.loads(out.stdout))
        assert c["distributed.gloo"]["status"] == "passed", (cmd, c["distributed.gloo"])
