"""The images' start-up banner, on the real images/cpu.yaml images: printed on an interactive start only (a terminal
on stdin, here a real pseudo-terminal), never for a plain `docker run IMAGE cmd` (CI logs stay clean); with
Docker's default 64 MB /dev/shm it names the flag that fixes it, under `imagebuild run` (a big /dev/shm) it does not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _helpers import ROOT, cpu_image, under_pty  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.cpu_images("cpu_build")]
PY = "import torch; print('ok', torch.__version__)"


@pytest.fixture(scope="module")
def runtime_image(request):
    if not shutil.which("docker"):
        pytest.skip("the docker CLI is not installed")
    return cpu_image(request, "runtime")


@pytest.fixture(scope="module")
def dev_image(request):
    return cpu_image(request, "dev")


def test_no_banner_without_a_terminal(runtime_image):
    p = subprocess.run(["docker", "run", "--rm", runtime_image, "python", "-c", PY], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("ok 2.") and p.stdout.count("\n") == 1
    assert "==" not in p.stderr and "TF32" not in p.stderr and "shm" not in p.stderr


def test_banner_on_an_interactive_start(runtime_image):
    code, out = under_pty(["docker", "run", "--rm", "-it", runtime_image, "python", "-c", PY])
    assert code == 0, out
    lines = out.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("== "))
    assert " runtime image " in lines[first] and lines[first + 1].startswith("torch ")
    assert "TF32: off" in out  # images/cpu.yaml: tf32 false
    # Docker's default /dev/shm is 64 MB: the banner says so and names the fix
    assert "WARNING: /dev/shm is 64 MB" in out and "--ipc=host" in out
    assert lines[-1].startswith("ok 2.")  # the command ran after the banner


def test_imagebuild_run_fixes_what_the_banner_warns_about(runtime_image):
    code, out = under_pty([sys.executable, "-m", "imagebuild", "run", "--no-workspace", runtime_image, "--",
                           "python", "-c", PY])
    assert code == 0, out
    assert "== " in out and "/dev/shm is" not in out  # shm sized from host memory: no warning
    # an engine that refuses memlock=-1 (user namespaces) is reported by run and by the banner alike
    assert ("engine refused ulimit memlock" in out) == ("--ulimit memlock=-1" in out.split("TF32:")[1])


def test_dev_banner_names_jupyter_and_ssh(dev_image):
    code, out = under_pty(["docker", "run", "--rm", "-it", dev_image, "true"])
    assert code == 0, out
    assert " dev image " in out and "imagebuild run --jupyter" in out and "imagebuild run --ssh" in out


def test_non_interactive_imagebuild_run_is_quiet(runtime_image, tmp_path):
    p = subprocess.run([sys.executable, "-m", "imagebuild", "run", "--workspace", str(tmp_path), runtime_image, "--",
                        "python", "-c", PY], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       stdin=subprocess.DEVNULL, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin",
                                                         # the engine under test (a private one in CI)
                                                         **({"DOCKER_HOST": os.environ["DOCKER_HOST"]}
                                                            if os.environ.get("DOCKER_HOST") else {})})
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("ok 2.") and "== " not in p.stdout + p.stderr
