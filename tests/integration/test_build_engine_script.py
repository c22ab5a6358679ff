"""scripts/docker-engine.sh: reuse, and a private `--fresh` engine next to the running one, then `--stop`."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "docker-engine.sh"


def _answers(env=None) -> bool:
    return subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                          env=env, timeout=20).returncode == 0


@pytest.fixture
def engine_available():
    if shutil.which("dockerd") is None or os.geteuid() != 0 or not _answers():
        pytest.skip("needs root, dockerd and a running engine")


def test_reuse_is_idempotent(engine_available):
    for _ in range(2):
        res = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        assert "engine answers" in res.stderr and res.stdout == ""


def test_fresh_engine_next_to_the_running_one(engine_available):
    outer_root = subprocess.run(["docker", "info", "--format", "{{.DockerRootDir}}"], capture_output=True,
                                text=True).stdout.strip()
    d = Path(tempfile.mkdtemp(prefix="ibe-", dir="/var/tmp"))
    try:
        res = subprocess.run([str(SCRIPT), "--fresh", str(d)], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == f"export DOCKER_HOST=unix://{d}/docker.sock"
        env = {**os.environ, "DOCKER_HOST": f"unix://{d}/docker.sock"}
        info = subprocess.run(["docker", "info", "--format", "{{.DockerRootDir}} {{.Images}} {{.Containers}}"],
                              capture_output=True, text=True, env=env).stdout.split()
        assert info == [str(d / "data"), "0", "0"]  # empty: nothing can pass on leftovers
        # idempotent: a second call finds it
        again = subprocess.run([str(SCRIPT), "--fresh", str(d)], capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and again.stdout == res.stdout
        # the shared engine is untouched
        assert subprocess.run(["docker", "info", "--format", "{{.DockerRootDir}}"], capture_output=True,
                              text=True).stdout.strip() == outer_root
        # no bridge network was created
        nets = subprocess.run(["docker", "network", "ls", "--format", "{{.Driver}}"], capture_output=True,
                              text=True, env=env).stdout.split()
        assert "bridge" not in nets
    finally:
        stop = subprocess.run([str(SCRIPT), "--stop", str(d)], capture_output=True, text=True, timeout=60)
        sock_left = Path(d, "docker.sock").exists()
        mounts_left = [ln for ln in Path("/proc/mounts").read_text().splitlines() if f" {d}/" in ln]
        shutil.rmtree(d, ignore_errors=True)
    assert stop.returncode == 0, stop.stderr
    assert not sock_left and mounts_left == []
    assert _answers()  # the shared engine still answers


def test_stop_refuses_a_foreign_pid(engine_available, tmp_path):
    (tmp_path / "docker.pid").write_text(str(os.getpid()))
    res = subprocess.run([str(SCRIPT), "--stop", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 1 and "not the private dockerd" in res.stderr
