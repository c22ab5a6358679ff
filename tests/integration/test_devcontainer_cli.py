"""`imagebuild devcontainer` proven with the real Dev Containers CLI (@devcontainers/cli, scripts/devcontainer-cli.sh)
against the engine DOCKER_HOST names, on the images/cpu.yaml dev image: the file it writes brings a container up,
`devcontainer exec` imports torch in it as the image's user at /workspace with run's /dev/shm and stack ulimit, on
the bytes the file names (the CLI's remoteUser-UID image is FROM them). The memlock choice the command probed is
what the engine takes: where the engine refuses `--ulimit memlock=-1` (no CAP_SYS_RESOURCE) the probed file still
comes up, and the same file with `--memlock unlimited` does not. Every container and image the CLI made is removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _helpers import ROOT, cpu_image, imagebuild  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.cpu_images("cpu_build")]
LABEL = "io.imagebuild.devcontainer"


@pytest.fixture(scope="module")
def devcontainer_cli() -> str:
    """The pinned CLI `make install` puts in .tools/ (scripts/devcontainer-cli.sh): a failure under make test, a
    skip with the reason elsewhere."""
    found = subprocess.run(["bash", str(ROOT / "scripts" / "devcontainer-cli.sh"), "--path"], capture_output=True,
                           text=True, timeout=30)
    if found.returncode != 0:
        why = found.stderr.strip() or "scripts/devcontainer-cli.sh --path failed"
        if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return found.stdout.strip()


@pytest.fixture(scope="module")
def dev_image(request, client):
    return cpu_image(request, "dev")


@pytest.fixture
def made(client):
    """Removes every container labelled by the file (and the probe's) and every image the CLI built, whatever
    happens in the test."""
    def vsc_tags() -> set[str]:  # the CLI's remoteUser-UID images (vsc-<folder>-<hash>-uid), never ours
        return {t for i in client.images.list() for t in i.tags if t.startswith("vsc-")}

    before = {c.id for c in client.containers.list(all=True, filters={"label": LABEL})}
    tags_before = vsc_tags()
    yield
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        if c.id not in before:
            c.remove(force=True, v=True)
    for ref in vsc_tags() - tags_before:  # also one a failed `up` built before its container failed
        client.images.remove(ref, force=True)
    assert vsc_tags() == tags_before
    assert {c.id for c in client.containers.list(all=True, filters={"label": LABEL})} == before


def _up(cli: str, folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([cli, "up", "--workspace-folder", str(folder), "--log-format", "json"],
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def _outcome(p: subprocess.CompletedProcess) -> dict:
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{") and '"outcome"' in line:
            return json.loads(line)
    return {}


def _engine_takes_memlock(client, image: str) -> bool:
    """Ask the engine directly, not through imagebuild: does a container with memlock=-1 start?"""
    import docker

    c = client.containers.create(image, ["true"], network_mode="none", labels={LABEL: "test"},
                                 ulimits=[docker.types.Ulimit(name="memlock", soft=-1, hard=-1)])
    try:
        c.start()
        return True
    except docker.errors.APIError as exc:
        assert "rlimit" in str(exc), exc
        return False
    finally:
        c.remove(force=True)


def test_devcontainer_up_and_exec_import_torch(client, dev_image, devcontainer_cli, made, tmp_path):
    t0 = time.monotonic()
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('hello from the workspace')\n")
    w = imagebuild("devcontainer", "--output", str(project), dev_image, timeout=300)
    assert w.returncode == 0, w.stderr
    doc = json.loads((project / ".devcontainer" / "devcontainer.json").read_text())
    image_id = client.images.get(dev_image).id
    assert doc["image"] == image_id or doc["image"].split("@")[-1] in client.images.get(dev_image).attrs["RepoDigests"]
    memlock_lines = [ln for ln in w.stderr.splitlines() if ln.startswith("memlock:")]
    takes = _engine_takes_memlock(client, image_id)
    assert len(memlock_lines) == 1 and memlock_lines[0].startswith(
        "memlock: unlimited (this engine accepted" if takes else "memlock: the engine's default (this engine "
        "refused --ulimit memlock=-1"), w.stderr
    assert ("memlock=-1" in doc["runArgs"]) is takes

    up = _up(devcontainer_cli, project)
    outcome = _outcome(up)
    assert up.returncode == 0 and outcome.get("outcome") == "success", up.stdout[-3000:] + up.stderr[-3000:]
    container = client.containers.get(outcome["containerId"])
    assert container.labels.get(LABEL) == "1"
    # the CLI ran our bytes: its remoteUser-UID image is FROM the image the file names (all of its layers first)
    ours = client.images.get(image_id).attrs["RootFS"]["Layers"]
    ran = client.images.get(container.attrs["Image"]).attrs["RootFS"]["Layers"]
    assert ran[:len(ours)] == ours
    host = container.attrs["HostConfig"]
    assert host["NetworkMode"] == "host" and host["ShmSize"] >= 1 << 30
    ulimits = {u["Name"]: u["Soft"] for u in host.get("Ulimits") or []}
    assert ulimits.get("stack") == 67108864 and (ulimits.get("memlock") == -1) is takes

    ex = subprocess.run([devcontainer_cli, "exec", "--workspace-folder", str(project), "sh", "-c",
                         "python -c 'import torch; print(torch.__version__)'; id -un; pwd; python train.py"],
                        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert ex.returncode == 0, ex.stderr[-3000:]
    version, user, pwd, hello = ex.stdout.strip().splitlines()[-4:]
    assert version.split("+")[0] == client.images.get(image_id).labels["io.imagebuild.torch"], version
    assert (user, pwd, hello) == (doc["remoteUser"], "/workspace", "hello from the workspace")
    print(f"\ndevcontainer write+up+exec: {time.monotonic() - t0:.1f}s (torch {version}, memlock "
          f"{'unlimited' if takes else 'default'})")


def test_memlock_unlimited_fails_where_the_engine_refuses_it(client, dev_image, devcontainer_cli, made, tmp_path):
    """What the probe saves the user from: on an engine without CAP_SYS_RESOURCE the same file with memlock=-1
    does not come up (on an engine that takes it, it does)."""
    image_id = client.images.get(dev_image).id
    takes = _engine_takes_memlock(client, image_id)
    w = imagebuild("devcontainer", "--memlock", "unlimited", "--output", str(tmp_path), dev_image, timeout=300)
    assert w.returncode == 0, w.stderr
    assert "memlock: unlimited (--memlock unlimited, not probed" in w.stderr
    assert "memlock=-1" in json.loads((tmp_path / ".devcontainer" / "devcontainer.json").read_text())["runArgs"]
    up = _up(devcontainer_cli, tmp_path)
    if takes:
        assert up.returncode == 0 and _outcome(up).get("outcome") == "success", up.stderr[-3000:]
    else:
        assert up.returncode != 0 and "rlimit" in up.stdout + up.stderr, up.stdout[-3000:] + up.stderr[-3000:]
