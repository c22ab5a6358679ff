"""One record per matrix, and the registry as the cache of a fresh engine — on the real CPU matrix.

After the session's build (tests/integration/conftest.py `cpu_build`), with no build flag repeated:
- `plan` shows, for every image, the inputs hash its label carries and the image ID the engine holds;
- `test` and `push --registry OTHER` work on the same images by ID (a second registry: no rebuild, no retest);
- a second, fresh engine (its own data-root) asks the registry first: (a) nothing changed: every image is up to
  date in the registry, nothing is pulled or built; (b, make test-all) a change that only touches the dev flavor: runtime is
  pulled once by digest, only dev is built on it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from _helpers import ROOT, imagebuild, start_registry, stop_registry

pytestmark = [pytest.mark.integration, pytest.mark.registry]
INPUTS_LABEL = "io.imagebuild.inputs-hash"


@pytest.fixture(scope="module")
def tested_build(cpu_tested):
    """The session's build after the session's one `imagebuild test` of it (conftest.cpu_tested)."""
    res = cpu_tested.result
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return cpu_tested.build


def creds(registry) -> dict:
    return {"IMAGEBUILD_REGISTRY_USER": registry.user, "IMAGEBUILD_REGISTRY_PASSWORD": registry.password}


def test_plan_shows_the_labels_hash_and_the_engines_image(tested_build):
    build = tested_build
    res = imagebuild("plan", "-m", str(ROOT / "images" / "cpu.yaml"), "--json")  # nothing written  # no flags: the record's inputs
    assert res.returncode == 0, res.stderr
    assert "inputs from " in res.stderr and "--wheelhouse" in res.stderr
    rows = {r["tag"]: r for r in json.loads(res.stdout)}
    for img in build.plan.images:
        info = build.client.api.inspect_image(img.tag)
        row = rows[img.tag]  # the record's registry: the tags the build made
        assert row["inputs_hash"] == info["Config"]["Labels"][INPUTS_LABEL] == img.inputs_hash
        assert row["state"]["image_id"] == info["Id"]
        assert row["state"]["tests"] and row["state"]["tests"][0]["failed"] == 0


def test_push_and_test_for_another_registry_reuse_the_built_and_tested_images(tested_build, tmp_path):
    build = tested_build
    password = secrets.token_hex(10)
    other = start_registry("other", password)
    try:
        prefix = f"{other['REGISTRY']}/ib-other-{secrets.token_hex(3)}"
        args = ["-m", str(ROOT / "images" / "cpu.yaml"), "--registry", prefix]
        t = imagebuild("test", *args, "--report-dir", str(tmp_path / "t"))
        assert t.returncode == 0, t.stdout[-3000:] + t.stderr[-3000:]
        assert t.stderr.count("up to date: ") == 3, t.stderr[-3000:]  # same content, same suite: no container
        p = imagebuild("push", *args, "--report-dir", str(tmp_path / "p"),
                       env={"IMAGEBUILD_REGISTRY_USER": "other", "IMAGEBUILD_REGISTRY_PASSWORD": password})
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        doc = json.loads((tmp_path / "p" / "build-report.json").read_text())
        assert doc["registry"] == prefix and doc["run"]["command"] == "push"
        for row, img in zip(doc["images"], build.plan.images, strict=True):
            assert row["tag"].startswith(prefix + "/") and row["push"]["status"] == "pushed"
            assert row["image_id"] == build.client.api.inspect_image(img.tag)["Id"]  # the very image built
        state = json.loads(Path(os.environ["IMAGEBUILD_STATE_DIR"], "cpu.state.json").read_text())
        runtime = state["images"][build.plan.images[1].id]
        assert any(repo.startswith(prefix) for repo in runtime["pushes"]), runtime["pushes"]
    finally:
        for img in build.plan.images:  # the tag and its aliases, as tagged for OTHER
            for ref in [f"{prefix}/{r.split('/')[-1]}" for r in (img.tag, *img.aliases)]:
                try:
                    build.client.api.remove_image(ref)
                except Exception:
                    pass
        stop_registry(other)


@pytest.fixture
def engine_b():
    """A second engine with an empty data-root (a fresh CI runner), stopped and deleted afterwards."""
    directory = tempfile.mkdtemp(prefix="ibB.", dir="/var/tmp")
    out = subprocess.run(["bash", str(ROOT / "scripts" / "docker-engine.sh"), "--fresh", directory],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    host = out.stdout.strip().split("=", 1)[1]
    import docker

    client = docker.DockerClient(base_url=host, timeout=600)
    try:
        yield host, client
    finally:
        client.close()
        subprocess.run(["bash", str(ROOT / "scripts" / "docker-engine.sh"), "--stop", directory],
                       capture_output=True, timeout=120)
        shutil.rmtree(directory, ignore_errors=True)


def _pushed(build, tmp_path: Path, engine_b) -> dict[str, str]:
    """The matrix pushed to the session's registry; the environment of a CLI run on engine B."""
    push = imagebuild("push", *build.args("--report-dir", str(tmp_path / "push")), env=creds(build.registry))
    assert push.returncode == 0, push.stdout[-3000:] + push.stderr[-3000:]
    host, _ = engine_b
    return {"DOCKER_HOST": host, "IMAGEBUILD_STATE_DIR": str(tmp_path / "state-b"), **creds(build.registry)}


@pytest.mark.fresh_engine
def test_fresh_engine_takes_unchanged_images_from_the_registry(tested_build, engine_b, tmp_path):
    build = tested_build
    env = _pushed(build, tmp_path, engine_b)
    _, client_b = engine_b

    # (a) nothing changed: up to date in the registry, nothing pulled, nothing built
    t0 = time.monotonic()
    args_a = build.build_args()
    args_a[args_a.index("--report-dir") + 1] = str(tmp_path / "report-a")
    args_a[args_a.index("--log-dir") + 1] = str(tmp_path / "logs-a")  # not the session build's log folder
    a = imagebuild("build", *args_a, env=env)
    seconds_a = time.monotonic() - t0
    assert a.returncode == 0, a.stdout[-3000:] + a.stderr[-3000:]
    assert "3 up-to-date" in a.stdout, a.stdout[-2000:]
    assert client_b.api.images(all=True) == [], "engine B pulled or built something"
    rows_a = json.loads((tmp_path / "report-a" / "build-report.json").read_text())["images"]
    assert all(r["status"] == "up-to-date" and r["source"].startswith("registry ") for r in rows_a), rows_a
    print(f"\nregistry cache (a) no change on a fresh engine: {seconds_a:.1f}s, 0 images pulled")


@pytest.mark.full_tier
@pytest.mark.fresh_engine
@pytest.mark.cold_build
def test_fresh_engine_pulls_the_parent_of_the_one_changed_image(tested_build, engine_b, tmp_path):
    """A change that only touches dev: runtime pulled once by digest, only dev built on it (~2 minutes: the pull
    and a cold dev build; make test keeps the test above, nothing changed: nothing pulled, nothing built)."""
    build = tested_build
    env = _pushed(build, tmp_path, engine_b)
    _, client_b = engine_b
    matrix = tmp_path / "cpu.yaml"
    text = (ROOT / "images" / "cpu.yaml").read_text()
    assert "    runtime: [numpy]" in text
    matrix.write_text(text.replace("    runtime: [numpy]", "    runtime: [numpy]\n    dev: [six]"))
    args = build.build_args()
    args[args.index("--matrix") + 1] = str(matrix)
    args[args.index("--report-dir") + 1] = str(tmp_path / "report-b")
    args[args.index("--log-dir") + 1] = str(tmp_path / "logs-b")  # its dev build's log: not over the session build's
    t0 = time.monotonic()
    b = imagebuild("build", *args, env=env)
    seconds_b = time.monotonic() - t0
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    rows = {r["flavor"]: r for r in json.loads((tmp_path / "report-b" / "build-report.json").read_text())["images"]}
    ids_a = {img.flavor: build.client.api.inspect_image(img.tag)["Id"] for img in build.plan.images}
    assert rows["base"]["status"] == "up-to-date" and rows["base"]["source"].startswith("registry ")
    assert rows["runtime"]["status"] == "up-to-date" and rows["runtime"]["source"].startswith("pulled ")
    assert rows["dev"]["status"] == "built"
    have = {i["Id"] for i in client_b.api.images(all=True)}
    assert ids_a["runtime"] in have and ids_a["base"] not in have and ids_a["dev"] not in have
    dev = client_b.api.inspect_image(rows["dev"]["image_id"])
    below = client_b.api.inspect_image(ids_a["runtime"])["RootFS"]["Layers"]
    assert dev["RootFS"]["Layers"][:len(below)] == below  # built on the pulled runtime
    print(f"registry cache (b) dev-only change: {seconds_b:.1f}s, runtime pulled once, dev built")
