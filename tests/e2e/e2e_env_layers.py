"""NOT in CI (`make e2e-layers`; about an hour on a loaded 2-CPU machine: two cold CPU runtime builds): BuildKit
lays the runtime's Python environment down the same way on two fresh engines (issue 24, item 1: "on BuildKit across
fresh engines too").

The engine IMAGEBUILD_BUILDKIT_HOST names (the make target starts a fresh dockerd 26.1 + buildx) builds
images/cpu.yaml's base + runtime cold; a second fresh modern engine of this test's own, given the first one's
bootstrapped OS image as a pulled base would be (`docker save` | `docker load`), builds them again: the runtime has
the same layer list, every diff ID. tests/integration/test_env_layers.py (in CI) proves the one-package change on
both backends on one engine. The file name keeps it out of CI's collection (not test_*.py); the target names it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from _helpers import BK_CONFIG, BK_HOST, ROOT, imagebuild  # noqa: E402

WHEELHOUSE = Path(os.environ.get("IMAGEBUILD_WHEELHOUSE") or os.environ.get("PIP_FIND_LINKS") or "/opt/wheels")
CA = os.environ.get("IMAGEBUILD_CA_CERT") or os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
PREFIX = "127.0.0.1:5999/ibe2e-layers"


def _build(host: str, tmp: Path) -> dict:
    """base + runtime of images/cpu.yaml on the engine at `host`, cold (--force, no registry); the runtime's row."""
    result = imagebuild("build", "--matrix", str(ROOT / "images" / "cpu.yaml"), "--registry", PREFIX,
                        "--only", "runtime", "--wheelhouse", str(WHEELHOUSE), "--ca-cert", CA,
                        "--torch-index-url", "none", "--plain", "--no-sbom", "--force", "--no-registry-cache",
                        "--backend", "buildkit", "--log-dir", str(tmp / "logs"), "--report-dir", str(tmp / "report"),
                        env={"DOCKER_HOST": host, "DOCKER_CONFIG": BK_CONFIG,
                             "IMAGEBUILD_STATE_DIR": str(tmp / "state")}, timeout=5400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp / "report" / "build-report.json").read_text())
    [row] = [img for img in report["images"] if img["flavor"] == "runtime"]
    print(f"\n[e2e-layers] {host}: runtime {row['build_seconds']:.0f} s, env layers {row.get('env_layers')}")
    return row


def test_a_second_fresh_buildkit_engine_lays_down_the_same_runtime_layers(tmp_path):
    import docker

    if not BK_HOST:
        pytest.fail("IMAGEBUILD_BUILDKIT_HOST is not set: run `make e2e-layers` (it starts a fresh modern engine)")
    if not list(WHEELHOUSE.glob("torch-2.13.0*cp311*.whl")):
        pytest.fail(f"no torch 2.13.0 cp311 wheel in {WHEELHOUSE} (IMAGEBUILD_WHEELHOUSE)")
    first = docker.DockerClient(base_url=BK_HOST, timeout=600)
    one = _build(BK_HOST, tmp_path / "one")
    assert [layer["tier"] for layer in one["env_layers"]] == ["torch", "matrix-numpy"]
    diff_ids = first.api.inspect_image(one["image_id"])["RootFS"]["Layers"]

    engine_dir = Path(tempfile.mkdtemp(prefix="ib-layers-", dir="/var/tmp"))
    script = str(ROOT / "scripts" / "modern-engine.sh")
    try:
        started = subprocess.run([script, "--fresh", str(engine_dir)], capture_output=True, text=True, timeout=300,
                                 check=False)
        assert started.returncode == 0, started.stderr
        host = next(ln.split("=", 1)[1] for ln in started.stdout.splitlines() if ln.startswith("export DOCKER_HOST="))
        second = docker.DockerClient(base_url=host, timeout=600)
        os_tags = [t for img in first.images.list() for t in img.tags if t.startswith("imagebuild-os/")]
        assert os_tags, "the first engine has no bootstrapped OS image"
        second.images.load(first.api.get_image(os_tags[0]))
        again = _build(host, tmp_path / "two")
        layers = second.api.inspect_image(again["image_id"])["RootFS"]["Layers"]
        assert layers == diff_ids, [n for n, (a, b) in enumerate(zip(layers, diff_ids, strict=False)) if a != b]
        second.close()
    finally:
        first.close()
        subprocess.run([script, "--stop", str(engine_dir)], capture_output=True, timeout=120, check=False)
        shutil.rmtree(engine_dir, ignore_errors=True)
