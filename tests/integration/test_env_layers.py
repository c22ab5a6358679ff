"""The runtime's Python environment in layers that follow change (issue 24, item 1), on real engines.

images/cpu.yaml cut to base + runtime (torch 2.13.0 CPU from the wheelhouse: tiers torch, matrix). On each backend
the runtime is built, one package (six) is added to the matrix's pip_packages and it is built again: every layer up
to the torch tier keeps its digest and only the matrix tier (and the small steps above it) changes; the tiers' file
sets are disjoint (no upper layer rewrites a lower one's file); `pip check` passes in the image; the build report
names each environment layer with its size. On BuildKit a second fresh engine builds the first matrix again: the
same tier layer digests. Five runtime builds in all (the smallest set that proves it); each prints its seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest
from _helpers import ROOT, imagebuild

from imagebuild.report.layers import tier_steps

BK_HOST = os.environ.get("IMAGEBUILD_BUILDKIT_HOST", "")
BK_CONFIG = os.environ.get("IMAGEBUILD_BUILDKIT_DOCKER_CONFIG") or str(ROOT / ".tools" / "docker-config")
PREFIX = "127.0.0.1:5999/ibtest-layers"
WHEELHOUSE = Path(os.environ.get("IMAGEBUILD_WHEELHOUSE") or os.environ.get("PIP_FIND_LINKS") or "/opt/wheels")
CA = os.environ.get("IMAGEBUILD_CA_CERT") or os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
TIERS = ("torch", "matrix")  # the CPU runtime's tiers, in layer order (no nvidia wheels, no torch family, no TE)


def _matrix(folder: Path, extra: str | None) -> Path:
    text = (ROOT / "images" / "cpu.yaml").read_text()
    for old, new in (("flavors: [base, runtime, dev]", "flavors: [base, runtime]"),
                     ("runtime: [numpy]", f"runtime: [numpy, {extra}]" if extra else "runtime: [numpy]")):
        assert old in text, f"images/cpu.yaml changed: update {old!r} here"
        text = text.replace(old, new)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cpu.yaml").write_text(text)
    return folder / "cpu.yaml"


def _build(matrix: Path, tmp: Path, env: dict[str, str], *extra: str) -> dict:
    """One `imagebuild build` of base + runtime; the runtime's report row (build seconds printed)."""
    if not list(WHEELHOUSE.glob("torch-2.13.0*cp311*.whl")):
        pytest.skip(f"no torch 2.13.0 cp311 wheel in {WHEELHOUSE}")
    started = time.monotonic()
    result = imagebuild("build", "--matrix", str(matrix), "--registry", PREFIX, "--wheelhouse", str(WHEELHOUSE),
                        "--ca-cert", CA, "--torch-index-url", "none", "--plain", "--no-sbom",
                        "--log-dir", str(tmp / "logs"), "--report-dir", str(tmp / "report"), *extra,
                        env=env, timeout=3600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp / "report" / "build-report.json").read_text())
    [row] = [img for img in report["images"] if img["flavor"] == "runtime"]
    print(f"\n[layers] {matrix.parent.name} {' '.join(extra)}: runtime {row['build_seconds']:.0f} s "
          f"(whole CLI {time.monotonic() - started:.0f} s), env layers {row.get('env_layers')}")
    return row


def _saved_layers(client, image_id: str, tmp: Path) -> tuple[list[str], dict[str, int], dict[str, set[str]]]:
    """`docker save` of the image: (diff IDs, tier -> index into them, tier -> the files its layer holds)."""
    archive = tmp / "image.tar"
    with archive.open("wb") as f:
        for chunk in client.api.get_image(image_id):
            f.write(chunk)
    with tarfile.open(archive) as tar:
        [manifest] = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        config = json.load(tar.extractfile(manifest["Config"]))  # type: ignore[arg-type]
        made = [h.get("created_by") for h in config["history"] if not h.get("empty_layer")]
        diff_ids = config["rootfs"]["diff_ids"]
        assert len(made) == len(diff_ids) == len(manifest["Layers"])
        steps = tier_steps(made, len(TIERS))
        assert steps is not None, made
        files: dict[str, set[str]] = {}
        for tier, index in zip(TIERS, steps, strict=True):
            with tarfile.open(fileobj=tar.extractfile(manifest["Layers"][index]), mode="r|*") as layer:
                files[tier] = {m.name.lstrip("./") for m in layer if not m.isdir()}
    archive.unlink()
    return diff_ids, dict(zip(TIERS, steps, strict=True)), files


def _check_layers(client, first: dict, second: dict, tmp: Path) -> list[str]:
    """first/second: the runtime rows before/after one package more. Returns the first image's diff IDs."""
    diff_ids, index, files = _saved_layers(client, first["image_id"], tmp)
    # no upper layer rewrites a lower one's file; each tier's own list of what it holds is in its layer
    assert not files["torch"] & files["matrix"], sorted(files["torch"] & files["matrix"])[:10]
    assert "opt/venv/.imagebuild-layers/torch.txt" in files["torch"]
    assert "opt/venv/.imagebuild-layers/matrix.txt" in files["matrix"]
    assert any("/site-packages/torch/" in f for f in files["torch"])
    assert any("/site-packages/numpy/" in f for f in files["matrix"])
    assert not any("/site-packages/numpy/" in f for f in files["torch"])
    after = client.api.inspect_image(second["image_id"])["RootFS"]["Layers"]
    changed = [n for n, (a, b) in enumerate(zip(diff_ids, after, strict=False)) if a != b]
    assert changed and changed[0] == index["matrix"], (changed, index)  # everything below the matrix tier kept
    assert diff_ids[: index["matrix"]] == after[: index["matrix"]]
    # the report names each environment layer and its size, from the built image
    for row in (first, second):
        assert [layer["tier"] for layer in row["env_layers"]] == list(TIERS)
        assert all(layer["size"] > 0 for layer in row["env_layers"])
    assert first["env_layers"][0]["size"] == second["env_layers"][0]["size"]
    # pip check in the image: the tiers installed with --no-deps still make one consistent environment
    out = client.containers.run(second["image_id"], ["-m", "pip", "check"], entrypoint="/opt/venv/bin/python",
                                network_mode="none", remove=True)
    assert b"No broken requirements found" in out
    out = client.containers.run(second["image_id"], ["-c", "import six, numpy, torch; print(torch.__version__)"],
                                entrypoint="/opt/venv/bin/python", network_mode="none", remove=True)
    assert b"2.13.0" in out
    return diff_ids


def test_classic_builder_keeps_every_layer_below_the_changed_tier(client, tmp_path):
    env = {"IMAGEBUILD_STATE_DIR": str(tmp_path / "state")}
    one = _build(_matrix(tmp_path / "one", None), tmp_path / "b1", env, "--backend", "classic")
    two = _build(_matrix(tmp_path / "two", "six"), tmp_path / "b2", env, "--backend", "classic")
    _check_layers(client, one, two, tmp_path)


@pytest.fixture(scope="module")
def bk_client():
    if not BK_HOST:
        if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
            pytest.fail("IMAGEBUILD_BUILDKIT_HOST is not set: scripts/run-tests.sh starts the modern engine")
        pytest.skip("no modern engine: eval \"$(scripts/modern-engine.sh --fresh DIR)\" and set "
                    "IMAGEBUILD_BUILDKIT_HOST to its DOCKER_HOST")
    import docker

    client = docker.DockerClient(base_url=BK_HOST, timeout=600)
    yield client
    client.close()


def test_buildkit_keeps_every_layer_below_the_changed_tier_and_a_fresh_engine_makes_the_same(bk_client, tmp_path):
    import docker

    env = {"DOCKER_HOST": BK_HOST, "DOCKER_CONFIG": BK_CONFIG, "IMAGEBUILD_STATE_DIR": str(tmp_path / "state")}
    bk = ("--backend", "buildkit", "--no-registry-cache")
    matrix = _matrix(tmp_path / "one", None)
    one = _build(matrix, tmp_path / "b1", env, *bk)
    two = _build(_matrix(tmp_path / "two", "six"), tmp_path / "b2", env, *bk)
    diff_ids = _check_layers(bk_client, one, two, tmp_path)

    engine_dir = Path(tempfile.mkdtemp(prefix="ib-layers-", dir="/var/tmp"))
    script = str(ROOT / "scripts" / "modern-engine.sh")
    try:
        started = subprocess.run([script, "--fresh", str(engine_dir)], capture_output=True, text=True, timeout=300,
                                 check=False)
        assert started.returncode == 0, started.stderr
        host = next(ln.split("=", 1)[1] for ln in started.stdout.splitlines() if ln.startswith("export DOCKER_HOST="))
        second = docker.DockerClient(base_url=host, timeout=600)
        os_tags = [t for img in bk_client.images.list() for t in img.tags if t.startswith("imagebuild-os/")]
        assert os_tags, "the first engine has no bootstrapped OS image"
        second.images.load(bk_client.api.get_image(os_tags[0]))
        again = _build(matrix, tmp_path / "b3", {**env, "DOCKER_HOST": host,
                                                 "IMAGEBUILD_STATE_DIR": str(tmp_path / "state2")}, *bk)
        layers = second.api.inspect_image(again["image_id"])["RootFS"]["Layers"]
        assert layers == diff_ids, [n for n, (a, b) in enumerate(zip(layers, diff_ids, strict=False)) if a != b]
        second.close()
    finally:
        subprocess.run([script, "--stop", str(engine_dir)], capture_output=True, timeout=120, check=False)
        shutil.rmtree(engine_dir, ignore_errors=True)
