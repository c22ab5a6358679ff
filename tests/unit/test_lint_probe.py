"""scripts/lint_probe.py: the probe object is annotated `Probe` wherever it is passed and never rebound. The gpu
section's crash on its first real GPU (a loop rebinding `p` to the device properties) is the planted case."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

GPU_LOOP = '''
from probe.common import Probe

def run(p: Probe) -> None:
    torch = p.import_torch()
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
    p.doc["gpu"] = {}
'''


def _rule() -> ModuleType:
    spec = importlib.util.spec_from_file_location("imagebuild_lint_probe", ROOT / "scripts" / "lint_probe.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_shipped_probe_follows_the_rules():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "lint_probe.py")], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == "", out.stdout


def test_the_gpu_sections_rebinding_is_refused():
    assert _rule().rebound_parameters(GPU_LOOP, "gpu.py") == [
        "gpu.py:7: function run rebinds its parameter 'p': give the new value a name of its own"]


@pytest.mark.parametrize("body", [
    "    p += 1\n", "    with open('x') as p:\n        pass\n", "    if (p := 3):\n        pass\n",
    "    try:\n        pass\n    except OSError as p:\n        pass\n", "    import os as p\n",
    "    def p():\n        pass\n", "    x, (y, p) = 1, (2, 3)\n", "    probe: int = 3\n",
])
def test_every_way_of_rebinding_is_refused(body):
    src = "def f(p: Probe, probe: Probe) -> None:\n" + body
    assert len(_rule().rebound_parameters(src, "x.py")) == 1


def test_untyped_probe_parameters_are_refused_and_other_names_are_free():
    rule = _rule()
    assert rule.rebound_parameters("def run(p):\n    pass\n", "x.py") == [
        "x.py:1: function run: parameter 'p' is the probe object: annotate it `Probe`"]
    ok = ("def run(p: Probe, a: str) -> None:\n    a = a.strip()\n    x = [p for p in range(3)]\n"
          "    def inner(p: Probe) -> None:\n        print(p)\n")
    assert rule.rebound_parameters(ok, "x.py") == []
