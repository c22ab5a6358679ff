"""`imagebuild run` for real, on the images/cpu.yaml images: a command with the caller's UID/GID and exit status,
JupyterLab (token works, no token gets 403) and sshd (key works, password refused) reached with real clients on
127.0.0.1, bad input failing with one line and no container, and every container gone afterwards."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _helpers import ROOT, cpu_image  # noqa: E402
from _servers import Server, run_containers  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.cpu_images("cpu_build")]


@pytest.fixture(scope="module")
def runtime_image(request, client):
    return cpu_image(request, "runtime")


@pytest.fixture(scope="module")
def dev_image(request, client):
    return cpu_image(request, "dev")


def _cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagebuild", "run", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd or ROOT, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})})


def test_command_as_the_caller_with_its_exit_status(client, runtime_image, tmp_path):
    before = run_containers(client)
    p = _cli(runtime_image, "--", "sh", "-c", "id -u; id -g; pwd; df -k /dev/shm | tail -1; touch made; exit 7",
             cwd=tmp_path)
    assert p.returncode == 7, p.stderr
    uid, gid, pwd, shm = p.stdout.splitlines()
    assert (int(uid), int(gid), pwd) == (os.getuid(), os.getgid(), "/workspace")
    assert int(shm.split()[1]) >= 1 << 20  # /dev/shm of at least 1 GiB (half the host's memory)
    made = tmp_path / "made"
    assert made.exists() and (made.stat().st_uid, made.stat().st_gid) == (os.getuid(), os.getgid())
    assert run_containers(client) == before  # removed on exit


def test_print_matches_what_runs(runtime_image, tmp_path):
    p = _cli("--print", runtime_image, "--", "python", "-c", "print(1)", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    line = p.stdout.strip()
    assert line.startswith("docker run --rm --name ibrun-") and f"-v {tmp_path}:/workspace" in line
    assert "--ulimit stack=67108864" in line and "--network=host" in line and line.endswith("python -c 'print(1)'")


def test_jupyter_token_works_and_no_token_gets_403(client, dev_image):
    before = run_containers(client)
    t0 = time.monotonic()
    server = Server("--jupyter", "--no-workspace", dev_image)
    try:
        m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/lab\?token=([0-9a-f]{48})", server.line)
        assert m, server.line
        port, token = m.group(1), m.group(2)
        print(f"\njupyter answered after {time.monotonic() - t0:.1f}s on port {port}")
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=30)
        assert exc.value.code == 403
        ok = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/api/status",
                                                           headers={"Authorization": f"token {token}"}), timeout=30)
        assert ok.status == 200 and b'"kernels"' in ok.read()
        lab = urllib.request.urlopen(server.line, timeout=60)
        assert lab.status == 200 and b"JupyterLab" in lab.read()
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert run_containers(client) == before


@pytest.mark.skipif(not (shutil.which("ssh") and shutil.which("ssh-keygen")),
                    reason="openssh-client not installed (scripts/system-deps.sh)")
def test_ssh_key_works_and_password_is_refused(client, dev_image, tmp_path):
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    before = run_containers(client)
    server = Server("--ssh", "--ssh-key", f"{key}.pub", "--no-workspace", dev_image)
    try:
        cmd = server.line.split()
        assert cmd[0] == "ssh" and cmd[-1].endswith("@127.0.0.1"), server.line
        ok = subprocess.run([*cmd[:-1], "-i", str(key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", cmd[-1],
                             "id -un; id -u"], capture_output=True, text=True, timeout=60)
        assert ok.returncode == 0, ok.stderr
        name, uid = ok.stdout.split()
        assert name == cmd[-1].split("@")[0]
        assert int(uid) == (os.getuid() if os.getuid() != 0 else 1000)  # the caller's UID (root: the image's user)
        # only public keys are offered: a password (or keyboard-interactive) login is refused outright
        pw = subprocess.run([*cmd[:-1], "-o", "BatchMode=yes", "-o", "PubkeyAuthentication=no",
                             "-o", "PreferredAuthentications=password,keyboard-interactive", cmd[-1], "true"],
                            capture_output=True, text=True, timeout=60)
        assert pw.returncode == 255 and "Permission denied (publickey)" in pw.stderr, pw.stderr
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert run_containers(client) == before


def test_bad_input_leaves_no_container(client, runtime_image, dev_image, tmp_path):
    before = run_containers(client)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cases = [
            (["--jupyter", runtime_image], "error: --jupyter needs a dev image"),
            (["--jupyter", "--port", str(port), dev_image], f"error: --port {port}: 127.0.0.1:{port} is in use"),
            (["--ssh", dev_image], "error: --ssh needs your public key: no "),
            # the CPU matrix's dev image has no `vscode:` (the VS Code image is test_dev_vscode.py's, full tier)
            (["--vscode", dev_image], f"error: --vscode: {dev_image} is a dev image without VS Code"),
        ]
        for args, message in cases:
            p = _cli(*args, env={"HOME": str(tmp_path)})
            assert p.returncode == 2 and p.stdout == "", (args, p.stderr)
            errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
            assert len(errors) == 1 and errors[0].startswith(message), (args, p.stderr)
    assert run_containers(client) == before
