"""The compile and release probe sections: failure reasons that name what is missing, version rules, and (with a
CPU torch venv) a real torch.compile on this host, once working and once with the C++ compiler taken away."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

from imagebuild.smoke import probe as P
from imagebuild.smoke.probe import pack, release, torch_compile

SMOKE_DIR = pack.PACKAGE_DIR.parent  # holds probe/: imported as the zipapp imports it
GOOD_TC = {"cxx": "/usr/bin/g++", "cc": "/usr/bin/cc", "python_include": "/usr/include/python3.11",
           "python_h": True, "libcuda_in_ldconfig": True}


def test_missing_names_each_absent_piece():
    assert torch_compile.missing(GOOD_TC, gpu=True) == []
    bad = dict(GOOD_TC, cxx=None, cc=None, python_h=False, libcuda_in_ldconfig=False)
    cpu = torch_compile.missing(bad, gpu=False)
    assert len(cpu) == 2 and cpu[0].startswith("C++ compiler (g++)") and "Python.h" in cpu[1]
    gpu = torch_compile.missing(bad, gpu=True)
    assert any(m.startswith("C compiler") for m in gpu) and any("libcuda.so.1" in m for m in gpu)
    # unknown loader cache (no ldconfig): not claimed missing
    assert torch_compile.missing(dict(GOOD_TC, libcuda_in_ldconfig=None), gpu=True) == []


def test_explain_puts_the_missing_piece_before_inductors_message():
    exc = RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nlong traceback")
    text = torch_compile.explain(exc, dict(GOOD_TC, cxx=None), gpu=False)
    assert text.startswith("missing C++ compiler (g++)") and text.endswith("No working C++ compiler found")
    assert "traceback" not in text


def test_cxx_from_environment_must_exist(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    assert torch_compile.toolchain()["cxx"] is None


class FakeProbe:
    def __init__(self):
        self.doc = {"checks": []}

    def check(self, name, status, reason="", **figures):
        self.doc["checks"].append({"name": name, "status": status, "reason": reason, "figures": figures})

    def by_name(self):
        return {c["name"]: c for c in self.doc["checks"]}


def _fake_torch(cudnn_runtime=91002, cudnn_compiled=(9, 10, 2), nccl=(2, 27, 5), cuda="12.8"):
    torch = types.SimpleNamespace()
    torch.version = types.SimpleNamespace(cuda=cuda)
    torch.backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: cudnn_runtime))
    torch._C = types.SimpleNamespace(_cudnn=types.SimpleNamespace(getCompileVersion=lambda: cudnn_compiled))
    torch.cuda = types.SimpleNamespace(nccl=types.SimpleNamespace(version=lambda: nccl))
    return torch


def _packages(cudnn="9.10.2.21", nccl="2.27.5"):
    table = {"nvidia-cudnn-cu12": cudnn, "nvidia-nccl-cu12": nccl}

    def lookup(*names):
        for n in names:
            if table.get(n):
                return n, table[n]
        return None, None

    return lookup


@pytest.mark.parametrize("case, torch_kw, pkgs, failed", [
    ("all agree", {}, {}, set()),
    ("runtime cuDNN older than compile-time", {"cudnn_runtime": 90100}, {"cudnn": "9.1.0.70"},
     {"release.cudnn_compile_version"}),
    ("cuDNN from elsewhere than the package", {"cudnn_runtime": 91300}, {},
     {"release.cudnn_package"}),
    ("NCCL from elsewhere than the package", {"nccl": (2, 21, 5)}, {}, {"release.nccl_package"}),
    ("no nvidia-nccl package", {}, {"nccl": None}, {"release.nccl_package"}),
])
def test_library_versions(monkeypatch, case, torch_kw, pkgs, failed):
    monkeypatch.setattr(release, "installed_version", _packages(**pkgs))
    p = FakeProbe()
    release._library_versions(p, _fake_torch(**torch_kw), {})
    got = {n for n, c in p.by_name().items() if c["status"] == "failed"}
    assert got == failed, (case, p.by_name())
    assert set(p.by_name()) == {"release.cudnn_compile_version", "release.cudnn_package", "release.nccl_package"}


def test_device_assert_must_raise():
    class Torch:
        def tensor(self, *a, **k):
            return 0

        def _assert_async(self, t):
            pass

        cuda = types.SimpleNamespace(synchronize=lambda: None)

    ok, reason, _ = release._device_assert(Torch())
    assert not ok and "raised nothing" in reason

    class Raising(Torch):
        cuda = types.SimpleNamespace(synchronize=lambda: (_ for _ in ()).throw(
            RuntimeError("CUDA error: device-side assert triggered")))

    ok, reason, _ = release._device_assert(Raising())
    assert ok and "RuntimeError" in reason


def _probe(python, env=None):
    out = subprocess.run([python, str(P.zipapp_path()), "--sections", "compile,release"], capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return {c["name"]: c for c in json.loads(out.stdout)["checks"]}


def test_compile_and_release_pass_with_a_compiler(torch_python):
    c = _probe(torch_python)
    for name in ("compile.toolchain", "compile.cpu_function", "compile.cpu_module", "compile.cpu_max_autotune",
                 "release.openmp", "release.cpu_isa", "release.conv2d_cpu", "release.linalg_cpu"):
        assert c[name]["status"] == "passed", c[name]
    assert c["compile.cpu_function"]["reason"].endswith("(C++ kernel)")


def test_compile_without_a_compiler_names_it(torch_python, tmp_path):
    env = dict(os.environ, CXX=str(tmp_path / "no-such-g++"), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"))
    c = _probe(torch_python, env)
    assert c["compile.toolchain"]["status"] == "failed" and "C++ compiler (g++)" in c["compile.toolchain"]["reason"]
    for name in ("compile.cpu_function", "compile.cpu_module"):
        assert c[name]["status"] == "failed" and c[name]["reason"].startswith("missing C++ compiler"), c[name]


@pytest.mark.parametrize("text, driver, status", [
    ("OSError: libcuda.so.1: cannot open shared object file: No such file or directory", False, "skipped"),
    ("OSError: libcuda.so.1: cannot open shared object file: No such file or directory", True, "failed"),
    ("RuntimeError: cudart shared object not found", False, "failed"),
    ("OSError: libcudnn.so.9: cannot open shared object file (needed by libcuda.so.1)", False, "failed"),
    ("ImportError: .../transformer_engine_torch.so: undefined symbol: _ZN3c104cuda9SetDeviceEi", False, "failed"),
])
def test_te_import_error_driver_vs_broken_install(text, driver, status):
    from imagebuild.smoke.probe import te

    got, reason = te.classify_import_error(text, driver)
    assert got == status
    if status == "skipped":
        assert reason.startswith(te.NEEDS_DRIVER)


@pytest.mark.parametrize("ahead", [True, False])
def test_the_probe_yields_the_cpu_to_a_child_started_ahead(ahead):
    """A section that starts its child ahead (compile) keeps that child at the probe's priority and lowers the
    probe's own (and so of everything it starts after): the child's chain runs first on a machine with few cores.
    Without such a child nothing changes."""
    code = f"""
import json, os, sys
sys.path.insert(0, {str(SMOKE_DIR)!r})
from probe.common import Probe, YIELD_NICE
def start(p):
    p.started["x"] = os.nice(0)
    p.yield_to_children = {ahead!r}
def run(p):
    p.doc["nice"] = [p.started["x"], os.nice(0)]
p = Probe(["system"])
p.run({{"system": run}}, {{"system": start}})
print(json.dumps([p.doc["nice"], YIELD_NICE]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    (before, after), step = json.loads(out.stdout)
    assert after == (min(19, before + step) if ahead else before)
