"""The hpc probe section (probe/hpcruntime.py) and the container it runs in (smoke/sides.py): a failing child
names the host variable whose removal fixes it, unwritable HOME and cache folders are named, an unknown UID is seen
as one, and the hpc container is read-only, unknown-UID, hostile-environment as enroot/Apptainer start images."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from imagebuild.smoke.probe import hpccode, hpcruntime, pack
from imagebuild.smoke.probe.common import Probe
from imagebuild.smoke.sides import HOSTILE_ENV, HPC_HOME, HPC_UID, hpc_kwargs, hpc_settings

SMOKE_DIR = pack.PACKAGE_DIR.parent  # holds probe/: imported as the zipapp imports it


def _checks(p: Probe) -> dict[str, dict]:
    return {c["name"]: c for c in p.doc["checks"]}


def test_hostile_variables_are_the_loader_and_python_ones():
    env = {"PYTHONPATH": "x", "PIP_INDEX_URL": "y", "LD_LIBRARY_PATH": "z", "PATH": "/bin", "CUDA_HOME": "c"}
    assert hpcruntime.hostile_variables(env) == ["CUDA_HOME", "LD_LIBRARY_PATH", "PIP_INDEX_URL", "PYTHONPATH"]


def test_a_failure_names_the_variable_that_causes_it(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/nonexistent/site-packages")
    monkeypatch.setenv("PIP_INDEX_URL", "http://pip.invalid/simple")
    code = "import os, sys; sys.exit('broken by PYTHONPATH' if os.environ.get('PYTHONPATH') else 0)"
    p = Probe(["hpc"])
    assert hpcruntime._run_named(p, "hpc.torch_import", code, "import torch") is False
    reason = _checks(p)["hpc.torch_import"]["reason"]
    assert "broken by PYTHONPATH" in reason and "passes without PYTHONPATH='/nonexistent/site-packages'" in reason


def test_home_that_cannot_be_written_is_named(monkeypatch, tmp_path):
    locked = tmp_path / "home"
    locked.mkdir(mode=0o500)
    monkeypatch.setenv("HOME", str(locked / "sub"))
    p = Probe(["hpc"])
    hpcruntime.home(p)
    c = _checks(p)["hpc.home"]
    if os.geteuid() == 0:  # root writes anywhere: the check passes, naming the folder
        assert c["status"] == "passed" and str(locked / "sub") in c["reason"]
    else:
        assert c["status"] == "failed" and f"HOME={locked / 'sub'} is not writable" in c["reason"]
    monkeypatch.delenv("HOME")
    p = Probe(["hpc"])
    hpcruntime.home(p)
    assert _checks(p)["hpc.home"]["reason"] == "HOME is not set"


def test_identity_reports_uid_and_getuser(monkeypatch):
    monkeypatch.setenv("USER", "researcher")
    p = Probe(["hpc"])
    hpcruntime.identity(p)
    c = _checks(p)["hpc.identity"]
    assert c["status"] == "passed" and "getuser() = researcher" in c["reason"]
    assert p.doc["hpc"]["identity"]["uid"] == os.getuid()


def test_section_runs_standalone_and_prints_one_json_document():
    env = {**os.environ, "PYTHONPATH": "/nonexistent", "LD_LIBRARY_PATH": "/nonexistent/lib"}
    boot = f"import sys; sys.path.insert(0, {str(SMOKE_DIR)!r}); from probe.hpcruntime import main; main()"
    out = subprocess.run([sys.executable, "-c", boot], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    names = [c["name"] for c in doc["checks"]]
    assert names[:3] == ["hpc.identity", "hpc.home", "hpc.host_env"] and "hpc.jupyter" in names
    assert doc["hpc"]["host_env"]["LD_LIBRARY_PATH"] == "/nonexistent/lib"
    cuda = next(c for c in doc["checks"] if c["name"] == "hpc.cuda")
    assert cuda["status"] == "skipped" and cuda["reason"]  # no GPU here: skipped, with its reason


def test_gpu_check_without_a_gpu_is_skipped_with_its_reason():
    p = Probe(["hpc"])
    assert hpcruntime._run_named(p, "hpc.cuda", "print('NOGPU')", "a CUDA tensor") is False
    assert _checks(p)["hpc.cuda"] == {"name": "hpc.cuda", "section": "hpc", "status": "skipped",
                                       "reason": hpcruntime.NO_GPU, "figures": {}}


@pytest.mark.parametrize("gpus", [False, True])
def test_hpc_container_is_started_as_enroot_and_apptainer_do(gpus):
    kw = hpc_kwargs(hpc_settings("img:tag", "x-hpc", gpus))
    assert kw["user"] == f"{HPC_UID}:{HPC_UID}" and kw["read_only"] is True
    assert set(kw["tmpfs"]) == {"/tmp", HPC_HOME} and f"uid={HPC_UID}" in kw["tmpfs"][HPC_HOME]
    assert HOSTILE_ENV.items() <= kw["environment"].items() and kw["environment"]["HOME"] == HPC_HOME
    assert kw["network_mode"] == "none" and ("device_requests" in kw) is gpus


def test_te_import_without_the_driver_is_skipped_by_the_te_sections_rule(monkeypatch):
    """A TE that lacks only the driver's libcuda on a GPU-less host is skipped (as probe.te judges it); a TE whose
    libcudart is gone fails."""
    monkeypatch.setattr(hpcruntime, "driver_present", lambda: False)
    p = Probe(["hpc"])
    driver = "import sys; sys.exit('OSError: libcuda.so.1: cannot open shared object file')"
    broken = "import sys; sys.exit('OSError: libcudart.so.12: cannot open shared object file')"
    hpcruntime._run_named(p, "hpc.te", driver, "import transformer_engine.pytorch", skip=hpcruntime._te_needs_driver)
    hpcruntime._run_named(p, "hpc.te2", broken, "import transformer_engine.pytorch", skip=hpcruntime._te_needs_driver)
    c = _checks(p)
    assert c["hpc.te"]["status"] == "skipped" and c["hpc.te"]["reason"].startswith("needs the NVIDIA driver (libcuda)")
    assert c["hpc.te2"]["status"] == "failed" and "libcudart.so.12" in c["hpc.te2"]["reason"]


def test_one_child_answers_each_program_apart():
    """The short programs share one child python: each answers on its own (an exception or sys.exit ends only its
    program), and a program that kills the child leaves the ones after it to children of their own."""
    crash = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    got = hpccode.answers_of([("ok", "print('one'); print('two')"), ("exit", "import sys; sys.exit('went wrong')"),
                               ("raise", "raise ValueError('bad value')"), ("zero", "import sys; print('z'); sys.exit(0)"),
                               ("crash", crash), ("after", "print('alone')")])
    assert got["ok"] == (True, "one | two") and got["zero"] == (True, "z")
    assert got["exit"] == (False, "went wrong")
    assert got["raise"][0] is False and got["raise"][1].endswith("ValueError: bad value")
    assert got["crash"][0] is False and got["after"] == (True, "alone")


def test_an_answer_from_the_shared_child_still_names_the_culprit(monkeypatch):
    """A program that failed in the shared child is run again without each host variable, as one run alone is."""
    monkeypatch.setenv("PYTHONPATH", "/nonexistent/site-packages")
    code = "import os, sys; sys.exit('broken by PYTHONPATH' if os.environ.get('PYTHONPATH') else 0)"
    answers = hpccode.answers_of([("import", code)])
    p = Probe(["hpc"])
    assert hpcruntime._run_named(p, "hpc.torch_import", code, "import torch", answer=answers["import"]) is False
    reason = _checks(p)["hpc.torch_import"]["reason"]
    assert "broken by PYTHONPATH" in reason and "passes without PYTHONPATH='/nonexistent/site-packages'" in reason
