"""`imagebuild export` of the real CPU runtime (conftest.cpu_build): the .sqsh unpacks to a root filesystem that runs
the hpc probe the way enroot starts it — unpacked by the calling user (enroot create), environment from
/etc/environment over a hostile host environment, through /etc/rc, as a UID/GID the image does not know, in its own
mount and PID namespace — a truncated copy fails
`export --check`, and the same image exported twice gives the same bytes (make test: the base; the full tier: the
runtime as well). The runtime's .sqsh that the enroot start runs is written `--compression none` (pyxis' example
configuration; gzip's minute of one-core compression buys these tests nothing): gzip, the default, is what both
reproducibility exports use."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
from _helpers import ROOT, imagebuild

pytestmark = pytest.mark.integration

UID = GID = 23456  # in no passwd/group file of the image
HOSTILE = {"PYTHONPATH": "/nonexistent/lib/python3.11/site-packages", "LD_LIBRARY_PATH": "/opt/nonsense/lib64",
           "CUDA_HOME": "/usr/local/cuda-0.0-nonsense", "PIP_INDEX_URL": "http://pip.invalid/simple",
           "PIP_REQUIRE_VIRTUALENV": "true", "PIP_NO_CACHE_DIR": "nonsense"}


def _runtime(cpu_build):
    assert cpu_build.result.returncode == 0, cpu_build.result.stdout[-3000:] + cpu_build.result.stderr[-3000:]
    return next(i for i in cpu_build.plan.images if i.flavor == "runtime")


@pytest.fixture(scope="module")
def exported(cpu_build, tmp_path_factory):
    if not shutil.which("mksquashfs"):
        pytest.skip("squashfs-tools not installed (scripts/system-deps.sh)")
    runtime = _runtime(cpu_build)
    out = tmp_path_factory.mktemp("export")
    res = imagebuild("export", *cpu_build.args("--only", runtime.id), "--compression", "none",
                     "-o", str(out / "runtime.sqsh"))
    assert res.returncode == 0, res.stderr[-3000:]
    return runtime, out, res


def _env_file(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_export_is_recorded_and_reproducible(exported, cpu_build):
    runtime, out, res = exported
    sqsh = out / "runtime.sqsh"
    assert "wrote" in res.stdout and " s; sha256:" in res.stdout
    digest = (out / "runtime.sqsh.sha256").read_text().split()[0]
    state = Path(os.environ["IMAGEBUILD_STATE_DIR"]) / "cpu.state.json"
    entry = json.loads(state.read_text())["images"][runtime.id]
    assert entry["exports"]["squashfs"]["sha256"] == f"sha256:{digest}"
    assert entry["exports"]["squashfs"]["path"] == str(sqsh.resolve())
    exists = imagebuild("export", runtime.tag, "-o", str(sqsh))
    assert exists.returncode != 0 and exists.stderr.count("error:") == 1 and "already exists" in exists.stderr


@pytest.mark.parametrize("flavor", [
    "base",  # make test: the base, twice (~0.1 GB each)
    pytest.param("runtime", marks=[pytest.mark.full_tier]),  # the runtime twice: ~4 minutes of mksquashfs
])
def test_the_same_image_exports_the_same_bytes(cpu_build, tmp_path, flavor):
    """Two exports of one image (gzip, the default) give one sha256."""
    image = next(i for i in cpu_build.plan.images if i.flavor == flavor)
    made = imagebuild("export", image.tag, "-o", str(tmp_path / "first.sqsh"))
    assert made.returncode == 0, made.stderr[-2000:]
    digest = (tmp_path / "first.sqsh.sha256").read_text().split()[0]
    again = imagebuild("export", image.tag, "-o", str(tmp_path / "again.sqsh"))
    assert again.returncode == 0, again.stderr[-2000:]
    assert (tmp_path / "again.sqsh.sha256").read_text().split()[0] == digest, "same image, other bytes"


def test_truncated_copy_fails_check(exported):
    _, out, _ = exported
    sqsh = out / "runtime.sqsh"
    ok = imagebuild("export", "--check", str(sqsh))
    assert ok.returncode == 0, ok.stderr
    cut = out / "cut.sqsh"
    with open(sqsh, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(sqsh.stat().st_size // 2))
    bad = imagebuild("export", "--check", str(cut))
    assert bad.returncode == 1 and "truncated" in bad.stderr, bad.stderr


def test_docker_archive_names_the_tag(cpu_build, tmp_path):
    """The base (~0.3 GB; the runtime's 1.9 GB archive would prove the same at six times the cost)."""
    base = next(i for i in cpu_build.plan.images if i.flavor == "base")
    tar = tmp_path / "base.tar"
    res = imagebuild("export", base.tag, "--format", "docker-archive", "-o", str(tar))
    assert res.returncode == 0, res.stderr[-2000:]
    with tarfile.open(tar) as t:
        manifest = json.load(t.extractfile("manifest.json"))  # type: ignore[arg-type]
    assert manifest[0]["RepoTags"] == [base.tag]
    tar.unlink()


def test_probe_passes_inside_the_unpacked_sqsh_as_enroot_starts_it(exported):
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("unsquashfs"):
        pytest.skip("needs root, unshare and unsquashfs to start the rootfs in its own namespaces")
    _, out, _ = exported
    work = Path(tempfile.mkdtemp(prefix="ibtest-enroot-", dir="/var/tmp"))  # a path the unprivileged user reaches
    try:
        os.chmod(work, 0o755)
        os.chown(work, UID, GID)
        sqsh = work / "runtime.sqsh"  # where the user can read it (pytest's folders are root's, 0700)
        shutil.copyfile(out / "runtime.sqsh", sqsh)
        os.chmod(sqsh, 0o644)
        run_in_rootfs(sqsh, work / "rootfs")
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(work)], check=False)


def run_in_rootfs(sqsh: Path, root: Path) -> dict:
    """`enroot create` (unpacked by the calling user, so its files are that user's), then `enroot start`."""
    unpack = subprocess.run(["setpriv", f"--reuid={UID}", f"--regid={GID}", "--clear-groups", "unsquashfs", "-q",
                             "-n", "-d", str(root), str(sqsh)], capture_output=True, text=True)
    assert unpack.returncode == 0, unpack.stderr[-2000:]
    environ = _env_file((root / "etc/environment").read_text())
    assert environ["PATH"].startswith("/opt/venv/bin"), environ
    rc = (root / "etc/rc").read_text()
    assert rc.startswith("# enroot-provenance: dockerd://sha256:") and 'cd "/workspace"' in rc, rc
    assert "tini" in rc
    assert not (root / ".dockerenv").exists() and not any((root / "dev").iterdir())
    assert (root / "home/ml").stat().st_uid == UID  # enroot create: the caller's files

    sys.path.insert(0, str(ROOT / "src" / "imagebuild" / "smoke"))
    from probe.pack import build_zipapp

    build_zipapp(root / "tmp/probe.pyz")
    # enroot: the host's environment, then /etc/environment over it (its HOME too, unless ENROOT_MOUNT_HOME)
    env = {**HOSTILE, "USER": "researcher", "HOME": "/home/researcher", **environ}
    boot = "import sys; sys.path.insert(0, '/tmp/probe.pyz'); from probe.hpcruntime import main; main()"
    inner = (f"mount --rbind /dev {root}/dev && exec chroot --userspec={UID}:{GID} --groups={GID} {root} "
             "/usr/bin/env -i " + " ".join(f"{k}={v}" for k, v in env.items())
             + f" /bin/sh /etc/rc python3 -c \"{boot}\"")
    proc = subprocess.run(["unshare", "--mount", "--pid", "--fork", f"--mount-proc={root}/proc", "sh", "-c", inner],
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    by_name = {c["name"]: c for c in doc["checks"]}
    failed = [f"{c['name']}: {c['reason']}" for c in doc["checks"] if c["status"] == "failed"]
    assert not failed, failed
    assert by_name["hpc.torch_import"]["status"] == "passed"
    assert by_name["hpc.compile"]["status"] == "passed"
    assert doc["hpc"]["identity"]["uid"] == UID and doc["hpc"]["identity"]["user"] is None
    assert set(HOSTILE) <= set(doc["hpc"]["host_env"])
    return doc
