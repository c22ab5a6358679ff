"""linux/arm64 on this amd64 machine, through QEMU: the CPU matrix's base flavor for linux/arm64 (a Debian 12 arm64
rootfs bootstrapped by mmdebstrap under emulation, then its Dockerfile built by BuildKit with --platform linux/arm64)
and the smoke suite run in its arm64 container, so the emulated path cannot rot. Kept to the base flavor: torch under
emulation is 5-10x slower (`make e2e-gh200` builds the big images, not CI).

Needs the modern engine (IMAGEBUILD_BUILDKIT_HOST, as test_buildkit_backend.py) and the qemu-aarch64 binfmt handler
with the F flag (scripts/run-tests.sh runs scripts/binfmt.sh). The classic builder refuses the same plan in one line
before anything builds.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from _helpers import ROOT, imagebuild

from imagebuild.host.binfmt import missing_emulation

BK_HOST = os.environ.get("IMAGEBUILD_BUILDKIT_HOST", "")
BK_CONFIG = os.environ.get("IMAGEBUILD_BUILDKIT_DOCKER_CONFIG") or str(ROOT / ".tools" / "docker-config")


def _matrix(tmp: Path) -> Path:
    """images/cpu.yaml's base flavor for linux/arm64 only (the amd64 base is built by the other tests)."""
    text = (ROOT / "images" / "cpu.yaml").read_text()
    text = text.replace("name: pytorch-cpu", "name: pytorch-cpu-arm64").replace(
        "  flavors: [base, runtime, dev]", "  flavors: [base]\n  backend: buildkit\n  platforms: [linux/arm64]")
    assert "platforms: [linux/arm64]" in text
    path = tmp / "cpu-arm64.yaml"
    path.write_text(text)
    return path


def _env(tmp: Path) -> dict[str, str]:
    return {"DOCKER_HOST": BK_HOST, "DOCKER_CONFIG": BK_CONFIG, "IMAGEBUILD_STATE_DIR": str(tmp / "state")}


@pytest.fixture(scope="module")
def arm_build(tmp_path_factory):
    required = os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1"
    missing = ("IMAGEBUILD_BUILDKIT_HOST is not set (scripts/modern-engine.sh)" if not BK_HOST
               else missing_emulation("aarch64"))
    if missing:
        if required:
            pytest.fail(f"linux/arm64 under emulation cannot run: {missing}")
        pytest.skip(f"linux/arm64 under emulation cannot run: {missing} (sudo scripts/binfmt.sh)")
    import docker

    tmp = tmp_path_factory.mktemp("arm64")
    matrix = _matrix(tmp)
    started = time.monotonic()
    result = imagebuild("build", "--matrix", str(matrix), "--plain", "--test", "--force",
                        "--report-dir", str(tmp / "report"), "--log-dir", str(tmp / "logs"),
                        env=_env(tmp), timeout=3600)
    seconds = time.monotonic() - started
    print(f"linux/arm64 CPU base under QEMU: bootstrap + build + smoke in {seconds:.0f} s")
    client = docker.DockerClient(base_url=BK_HOST, timeout=600)
    yield result, client, tmp, matrix
    client.close()


def test_arm64_base_builds_and_passes_its_smoke_suite_under_emulation(arm_build):
    result, client, tmp, _ = arm_build
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [row] = json.loads((tmp / "report" / "build-report.json").read_text())["images"]
    assert row["status"] == "built" and row["platform"] == "linux/arm64"
    assert row["tag"].endswith("-debian12-arm64-base")
    tests = row["tests"]
    assert tests["failed"] == 0 and tests["passed"] > 0, tests
    info = client.api.inspect_image(row["tag"])
    assert (info["Os"], info["Architecture"]) == ("linux", "arm64")
    assert info["Id"] == row["image_id"]
    # the container really is aarch64 (run through the F-flag handler): not an amd64 image labelled arm64
    out = client.containers.run(row["tag"], ["-m"], entrypoint="uname", network_mode="none", remove=True,
                                platform="linux/arm64")
    assert out.decode().strip() == "aarch64"
    record = json.loads((tmp / "state" / "cpu-arm64.state.json").read_text())
    [entry] = record["images"].values()
    assert entry["image_id"] == row["image_id"]


def test_the_classic_builder_refuses_arm64_before_anything_builds(arm_build, tmp_path):
    _, _, _, matrix = arm_build
    result = imagebuild("build", "--matrix", str(matrix), "--backend", "classic", "--force",
                        "--report-dir", str(tmp_path / "report"), env=_env(tmp_path))
    assert result.returncode == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: the classic builder builds only the engine's platform (linux/amd64); 1 "
                               "selected image(s) are linux/arm64"), lines
    assert not (tmp_path / "report" / "build-report.json").exists()
