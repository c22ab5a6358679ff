"""scripts/modern-engine.sh and scripts/cosign.sh (one fetch: scripts/trixie-debs.sh): what they fetch is verified (a
tampered index or package is refused, nothing installed), cosign 2.5 installs and runs, and a private dockerd 26.1
with buildx starts beside the classic engine and stops again.

The verification tests serve a local mirror made from the files `make install` fetched (.tools/cache): the genuine
signed InRelease and Packages.xz, with one byte changed where a test says so.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "modern-engine.sh"
COSIGN_SCRIPT = ROOT / "scripts" / "cosign.sh"
CACHE = Path(os.environ.get("IMAGEBUILD_TOOLS_DIR") or ROOT / ".tools") / "cache"  # what `make install` fetched


def _needs_install():
    if not (CACHE / "trixie-InRelease").exists() or not (CACHE / "Packages.xz").exists():
        if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
            pytest.fail("scripts/modern-engine.sh install has not run (make install)")
        pytest.skip("scripts/modern-engine.sh install has not run (make install)")


@pytest.fixture
def mirror(tmp_path):
    """A local copy of the archive paths the script reads, served over HTTP; yields (root folder, URL)."""
    _needs_install()
    root = tmp_path / "mirror"
    (root / "dists" / "trixie" / "main" / "binary-amd64").mkdir(parents=True)
    shutil.copy(CACHE / "trixie-InRelease", root / "dists" / "trixie" / "InRelease")
    shutil.copy(CACHE / "Packages.xz", root / "dists" / "trixie" / "main" / "binary-amd64" / "Packages.xz")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _install(url: str, tools: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), "install"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "IMAGEBUILD_DEBIAN_MIRROR": url, "IMAGEBUILD_TOOLS_DIR": str(tools)})


def _flip(path: Path, needle: bytes) -> None:
    data = path.read_bytes()
    at = data.index(needle)
    path.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1:])


def test_a_tampered_inrelease_is_refused(mirror, tmp_path):
    root, url = mirror
    _flip(root / "dists" / "trixie" / "InRelease", b"Codename: trixie")
    res = _install(url, tmp_path / "tools")
    assert res.returncode == 1
    assert "InRelease does not verify against" in res.stderr
    assert not (tmp_path / "tools" / "docker-26.1.5").exists()


def test_a_tampered_index_is_refused(mirror, tmp_path):
    root, url = mirror
    index = root / "dists" / "trixie" / "main" / "binary-amd64" / "Packages.xz"
    index.write_bytes(index.read_bytes()[:-1] + b"\0")
    res = _install(url, tmp_path / "tools")
    assert res.returncode == 1 and "is not the" in res.stderr and "the signed Release lists" in res.stderr


def test_a_tampered_package_is_refused(mirror, tmp_path):
    root, url = mirror
    deb = next(CACHE.glob("docker-buildx_*.deb"))
    pool = root / "pool" / "main" / "d" / "docker-buildx"
    pool.mkdir(parents=True)
    (pool / deb.name).write_bytes(deb.read_bytes() + b"tampered")
    # the engine's packages genuine: the refusal is the buildx one's
    for name, folder in (("docker.io", "d/docker.io"), ("containerd", "c/containerd")):
        genuine = next(CACHE.glob(f"{name}_*.deb"))
        (root / "pool" / "main" / folder).mkdir(parents=True)
        shutil.copy(genuine, root / "pool" / "main" / folder / genuine.name)
    res = _install(url, tmp_path / "tools")
    assert res.returncode == 1 and f"{deb.name} sha256" in res.stderr
    assert not (tmp_path / "tools" / "docker-config" / "cli-plugins" / "docker-buildx").exists()
    assert not (tmp_path / "tools" / "docker-26.1.5").exists()  # nothing of the engine installed either


def _cosign_pool(root: Path) -> tuple[Path, Path]:
    """(the genuine cosign .deb make install fetched, its place in the local mirror's pool)"""
    debs = list(CACHE.glob("cosign_*.deb"))
    if not debs:
        pytest.skip("scripts/cosign.sh install has not run (make install)")
    pool = root / "pool" / "main" / "c" / "cosign"
    pool.mkdir(parents=True)
    return debs[0], pool / debs[0].name


def test_a_tampered_cosign_package_is_refused(mirror, tmp_path):
    root, url = mirror
    deb, served = _cosign_pool(root)
    served.write_bytes(deb.read_bytes()[:-4] + b"evil")
    res = subprocess.run([str(COSIGN_SCRIPT), "install"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "IMAGEBUILD_DEBIAN_MIRROR": url, "IMAGEBUILD_TOOLS_DIR": str(tmp_path)})
    assert res.returncode == 1 and f"{deb.name} sha256" in res.stderr and "trixie's index lists" in res.stderr
    assert not (tmp_path / "bin" / "cosign").exists()


def test_cosign_installs_from_the_verified_index_and_runs(mirror, tmp_path):
    root, url = mirror
    deb, served = _cosign_pool(root)
    shutil.copy(deb, served)
    env = {**os.environ, "IMAGEBUILD_DEBIAN_MIRROR": url, "IMAGEBUILD_TOOLS_DIR": str(tmp_path)}
    res = subprocess.run([str(COSIGN_SCRIPT), "install"], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    assert "installed cosign 2.5.0" in res.stderr
    binary = tmp_path / "bin" / "cosign"
    path = subprocess.run([str(COSIGN_SCRIPT), "--path"], capture_output=True, text=True, timeout=30, env=env)
    assert path.stdout.strip() == str(binary)
    help_text = subprocess.run([str(binary), "sign", "--help"], capture_output=True, text=True, timeout=30)
    assert "--tlog-upload" in help_text.stdout and "--key" in help_text.stdout
    again = subprocess.run([str(COSIGN_SCRIPT), "install"], capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0 and "is in" in again.stderr  # idempotent: nothing fetched again


def test_fresh_modern_engine_with_buildx_and_the_containerd_store():
    _needs_install()
    if os.geteuid() != 0 or shutil.which("runc") is None:
        pytest.skip("needs root and bookworm's runc")
    d = Path(tempfile.mkdtemp(prefix="ibm-", dir="/var/tmp"))
    try:
        res = subprocess.run([str(SCRIPT), "--fresh", str(d)], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        exports = dict(line.removeprefix("export ").split("=", 1) for line in res.stdout.splitlines())
        assert exports["DOCKER_HOST"] == f"unix://{d}/docker.sock"
        env = {**os.environ, **exports}
        version = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], env=env,
                                 capture_output=True, text=True, timeout=30).stdout
        assert version.startswith("26.1.5")
        components = subprocess.run(["docker", "version", "--format",
                                     "{{range .Server.Components}}{{.Name}} {{.Version}};{{end}}"],
                                    env=env, capture_output=True, text=True, timeout=30).stdout
        assert "containerd 1.7.24" in components, components  # the engine's pair, trixie's, not bookworm's 1.6
        buildx = subprocess.run(["docker", "buildx", "version"], env=env, capture_output=True, text=True, timeout=30)
        assert "0.13.1" in buildx.stdout
        status = subprocess.run(["docker", "info", "--format", "{{json .DriverStatus}}"], env=env,
                                capture_output=True, text=True, timeout=30).stdout
        assert "io.containerd.snapshotter.v1" in status
    finally:
        subprocess.run([str(SCRIPT), "--stop", str(d)], capture_output=True, timeout=60, check=False)
        shutil.rmtree(d, ignore_errors=True)
