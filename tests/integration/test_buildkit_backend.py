"""images/cpu.yaml built through the BuildKit backend on the modern engine (dockerd 26.1 + buildx 0.13.1, started by
scripts/modern-engine.sh; scripts/run-tests.sh exports IMAGEBUILD_BUILDKIT_HOST and IMAGEBUILD_BUILDKIT_DOCKER_CONFIG).

One BuildKit build of the CPU matrix, smoke-tested (`--test`), compared with the classic build the session already
has (conftest.cpu_build, same registry prefix): the same tags, the same label keys, each image's labels its own, the
same record entries, sizes within 2%. Debian 12's 20.10 engine refuses the backend before anything builds.

A second fresh modern engine (own data-root; the OS image given to it as a pulled base would be: `docker save` |
`docker load`) builds the base image again: the same image ID (SOURCE_DATE_EPOCH + rewritten layer dates). It exports
a registry cache of every stage while doing so; emptied of images and build cache (a fresh runner), it then rebuilds
a changed base (one pip package more) and takes every unchanged stage from that cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from _helpers import BK_CONFIG, ROOT, imagebuild, start_registry, stop_registry
from _helpers import bk_args as _bk_args
from _helpers import bk_env as _bk_env

LABELS = ("io.imagebuild.inputs-hash", "io.imagebuild.base-id", "io.imagebuild.source-date-epoch")


def _content_bytes(client, ref: str) -> int:
    """`du -sbx /` inside the image (apparent sizes of its files), in a container without network."""
    out = client.containers.run(ref, ["-sbx", "/"], entrypoint="du", user="0", network_mode="none", remove=True)
    return int(out.split()[0])


def _record(state: Path) -> dict:
    """The CPU matrix's record in `state` (other tests of the session record other matrices there)."""
    return json.loads((state / "cpu.state.json").read_text())


def test_buildkit_build_passes_the_smoke_suite(bk_build):
    result, _, tmp = bk_build
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp / "report" / "build-report.json").read_text())
    images = report["images"]
    assert len(images) == 3 and all(img["status"] == "built" for img in images)
    for img in images:
        tests = img.get("tests") or {}
        assert tests.get("failed", 0) == 0 and tests.get("passed", 0) > 0, img


def test_tags_labels_and_record_match_the_classic_build(bk_build, cpu_build):
    result, client, tmp = bk_build
    assert result.returncode == 0
    ids = {}
    for img in cpu_build.plan.images:
        classic = cpu_build.client.api.inspect_image(img.tag)
        bk = client.api.inspect_image(img.tag)  # the same tag, in the modern engine's store
        ids[img.tag] = bk["Id"]
        assert set(bk["Config"]["Labels"]) == set(classic["Config"]["Labels"]), img.tag
        # sizes within 2%: the bytes of the image's files (the stores' own figures differ in kind: the containerd
        # store's `Size` is the compressed content, its history sizes are disk blocks)
        bk_size, classic_size = _content_bytes(client, img.tag), _content_bytes(cpu_build.client, img.tag)
        assert abs(bk_size - classic_size) <= 0.02 * classic_size, (img.tag, bk_size, classic_size)
    for img in cpu_build.plan.images:  # each image's labels its own: the child's base-id is its parent's ID
        labels = client.api.inspect_image(img.tag)["Config"]["Labels"]
        if img.parent:
            assert labels["io.imagebuild.base-id"] == ids[img.parent]
    hashes = [client.api.inspect_image(i.tag)["Config"]["Labels"][LABELS[0]] for i in cpu_build.plan.images]
    assert len(set(hashes)) == 3
    bk_record = _record(tmp / "state")
    classic_record = _record(Path(os.environ["IMAGEBUILD_STATE_DIR"]))
    assert set(bk_record["images"]) == set(classic_record["images"])
    for key, entry in bk_record["images"].items():
        assert set(entry) == set(classic_record["images"][key]), key


def test_the_20_10_engine_is_refused_before_anything_builds(cpu_build, tmp_path):
    """The classic engine of this session is Debian 12's dockerd 20.10 (BuildKit v0.8)."""
    version = cpu_build.client.version()["Version"]
    if not version.startswith("20."):
        pytest.skip(f"the classic engine is {version}, not 20.10")
    result = imagebuild("build", *_bk_args(cpu_build, tmp_path), env={"DOCKER_CONFIG": BK_CONFIG,
                                                                      "IMAGEBUILD_STATE_DIR": str(tmp_path)})
    assert result.returncode == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"Docker Engine {version}" in lines[0], lines
    assert "Traceback" not in result.stderr


def test_a_real_bake_of_the_exported_compose_file(bk_build, cpu_build, tmp_path):
    """`imagebuild bake` -> `docker buildx bake` on the modern engine (no bridge): the base image builds with
    host networking (--no-cache: every RUN really runs), carries its own labels, and no credential is in the file.
    Then `imagebuild build` of the same inputs finds that image up to date (its source date, CREATED and REVISION are
    build's; its layers stand on the OS image build uses) and reports the bake's image ID."""
    result, client, bk_dir = bk_build
    assert result.returncode == 0
    # the bake re-tags the session's base (its tag and alias) with its own build (another ID: its layers keep
    # build-time dates); every tag of the session's base goes back afterwards, so later tests build on the base
    # bk_build made
    [base_id] = [r["image_id"] for r in json.loads((bk_dir / "report" / "build-report.json").read_text())["images"]
                 if r["flavor"] == "base"]
    session_tags = list(client.api.inspect_image(base_id)["RepoTags"])
    try:
        _bake_then_build(client, cpu_build, tmp_path)
    finally:
        for ref in session_tags:
            repo, _, tag = ref.rpartition(":")
            client.api.tag(base_id, repo, tag)


def _bake_then_build(client, cpu_build, tmp_path) -> None:
    import subprocess

    import yaml

    out = tmp_path / "docker-bake.yml"
    secret = "https://bakeuser:bake-Pa55@127.0.0.1:9/simple"
    inputs = ("--wheelhouse", os.environ.get("IMAGEBUILD_WHEELHOUSE", "/opt/wheels"),
              "--ca-cert", os.environ.get("IMAGEBUILD_CA_CERT", "/etc/ssl/certs/ca-certificates.crt"),
              "--torch-index-url", "none", "--pip-extra-index-url", secret, "--only", "*-base")
    exported = imagebuild("bake", *cpu_build.args(*inputs, "-o", str(out)), env=_bk_env(tmp_path / "state"))
    assert exported.returncode == 0, exported.stderr
    text = out.read_text()
    assert "bake-Pa55" not in text
    [(name, service)] = yaml.safe_load(text)["services"].items()
    assert service["build"]["network"] == "host"
    [base] = [i for i in cpu_build.plan.images if i.flavor == "base"]
    os_id = client.api.inspect_image(base.tag)["Config"]["Labels"]["io.imagebuild.base-id"]
    env = {**os.environ, **_bk_env(tmp_path / "state"), "PIP_EXTRA_INDEX_URL": secret,
           "OS_IMAGE_debian12": _pin(client, os_id)}
    baked = subprocess.run(["docker", "buildx", "bake", "-f", str(out), "--no-cache", "--provenance=false",
                            "--progress", "plain"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=1800, check=False)
    assert baked.returncode == 0, baked.stderr[-3000:]
    assert "bake-Pa55" not in baked.stderr
    labels = client.api.inspect_image(service["build"]["tags"][0])["Config"]["Labels"]
    assert labels["io.imagebuild.inputs-hash"] == service["build"]["labels"]["io.imagebuild.inputs-hash"]
    assert labels["io.imagebuild.source-date-epoch"].isdigit()
    # the source date build uses: the OS image's (a bootstrap image's `created` is its rootfs's SOURCE_DATE_EPOCH)
    os_created = client.api.inspect_image(os_id)["Created"]
    assert labels["org.opencontainers.image.created"] == os_created[:19] + "Z" and labels["io.imagebuild.base-id"] == ""
    baked_id = client.api.inspect_image(service["build"]["tags"][0])["Id"]
    build = imagebuild("build", *cpu_build.args(*inputs, "--backend", "buildkit", "--plain", "--no-sbom",
                                                "--no-registry-cache", "--log-dir", str(tmp_path / "logs"),
                                                "--report-dir", str(tmp_path / "report")),
                       env=_bk_env(tmp_path / "state"), timeout=600)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    [row] = [r for r in json.loads((tmp_path / "report" / "build-report.json").read_text())["images"]
             if r["flavor"] == "base"]
    assert (row["status"], row["image_id"]) == ("up-to-date", baked_id)


def _pin(client, image_id: str) -> str:
    """A tag for the OS image the bake's base target starts from (BuildKit cannot take an image ID)."""
    client.api.tag(image_id, "imagebuild-pin", image_id.removeprefix("sha256:"))
    return f"imagebuild-pin:{image_id.removeprefix('sha256:')}"


# -- a second fresh engine: the same base image ID, then a registry cache for a changed image ---------------------

@pytest.fixture(scope="module")
def second_engine(bk_build):
    """A fresh dockerd 26.1 of its own (scripts/modern-engine.sh --fresh), with the first engine's OS image loaded,
    and a registry without auth for the BuildKit cache. Both stopped and deleted afterwards."""
    import docker

    result, first, _ = bk_build
    assert result.returncode == 0
    engine_dir = Path(tempfile.mkdtemp(prefix="ib-bk2-", dir="/var/tmp"))
    reg_dir = Path(tempfile.mkdtemp(prefix="ib-bk2-reg-"))
    script = str(ROOT / "scripts" / "modern-engine.sh")
    try:
        started = subprocess.run([script, "--fresh", str(engine_dir)], capture_output=True, text=True, timeout=300,
                                 check=False)
        assert started.returncode == 0, started.stderr
        host = next(ln.split("=", 1)[1] for ln in started.stdout.splitlines() if ln.startswith("export DOCKER_HOST="))
        registry = start_registry(None, "", "--dir", str(reg_dir))["REGISTRY"]
        second = docker.DockerClient(base_url=host, timeout=600)
        os_tags = [t for img in first.images.list() for t in img.tags if t.startswith("imagebuild-os/")]
        assert os_tags, "the first engine has no bootstrapped OS image"
        second.images.load(first.api.get_image(os_tags[0]))
        yield host, second, first, registry
        second.close()
    finally:
        stop_registry({"REGISTRY_DIR": str(reg_dir)})
        subprocess.run([script, "--stop", str(engine_dir)], capture_output=True, timeout=120, check=False)
        shutil.rmtree(engine_dir, ignore_errors=True)


def _build_base(cpu_build, host: str, tmp: Path, cache: str, matrix: Path | None = None):
    args = _bk_args(cpu_build, tmp)
    if matrix is not None:
        args[args.index("--matrix") + 1] = str(matrix)
    args = [a for a in args if a != "--test"]
    return imagebuild("build", *args, "--only", "base", "--no-sbom", "--buildkit-cache", cache,
                      env={**_bk_env(tmp / "state"), "DOCKER_HOST": host}, timeout=1800)


def test_a_second_fresh_engine_builds_the_same_base_image_id(bk_build, cpu_build, second_engine, tmp_path):
    host, second, first, registry = second_engine
    result = _build_base(cpu_build, host, tmp_path, f"{registry}/ibcache")
    assert result.returncode == 0, result.stderr[-3000:]
    [base] = [i for i in cpu_build.plan.images if i.flavor == "base"]
    # the first engine's base by the ID its build reported: the bake test re-tags the base with its own build
    report = json.loads((bk_build[2] / "report" / "build-report.json").read_text())
    [first_id] = [img["image_id"] for img in report["images"] if img["flavor"] == "base"]
    one, two = first.api.inspect_image(first_id), second.api.inspect_image(base.tag)
    assert one["Config"]["Labels"] == two["Config"]["Labels"]
    layers = list(zip(one["RootFS"]["Layers"], two["RootFS"]["Layers"], strict=False))
    assert [n for n, (a, b) in enumerate(layers) if a != b] == [], "layers that differ (by index)"
    assert one["Id"] == two["Id"]


def test_a_changed_image_on_an_emptied_engine_takes_its_unchanged_stages_from_the_registry_cache(
        cpu_build, second_engine, tmp_path):
    host, second, first, registry = second_engine
    cache = f"{registry}/ibcache"
    [base] = [i for i in cpu_build.plan.images if i.flavor == "base"]
    if not any(t.startswith(f"{registry}/ibcache:") for t in _cache_tags(registry)):
        pytest.fail("the first build on this engine exported no registry cache")
    # a fresh runner: no image of the plan, no build cache (the OS image stays: the runner would pull it)
    for img in second.images.list():
        if not any(t.startswith("imagebuild-os/") for t in img.tags):
            second.images.remove(img.id, force=True)
    pruned = subprocess.run(["docker", "builder", "prune", "--all", "--force"], capture_output=True, text=True,
                            env={**os.environ, "DOCKER_HOST": host, "DOCKER_CONFIG": BK_CONFIG}, timeout=300,
                            check=False)
    assert pruned.returncode == 0, pruned.stderr
    matrix = tmp_path / "cpu.yaml"
    matrix.write_text((ROOT / "images" / "cpu.yaml").read_text().replace(
        "    runtime: [numpy]", "    base: [six]\n    runtime: [numpy]"))
    result = _build_base(cpu_build, host, tmp_path, cache, matrix)
    assert result.returncode == 0, result.stderr[-3000:]
    log = "".join(p.read_text() for p in (tmp_path / "logs").glob("*base*"))
    steps = [ln for ln in log.splitlines() if ln.startswith("#")]
    apt = [ln for ln in steps if "apt-get update" in ln]
    pip = [ln for ln in steps if "pip install" in ln]
    assert apt and all(ln.endswith("(cached)") for ln in apt), steps  # unchanged: from the registry cache
    assert pip and not any(ln.endswith("(cached)") for ln in pip), steps  # the changed stage really ran
    labels = second.api.inspect_image(base.tag)["Config"]["Labels"]
    assert labels["io.imagebuild.inputs-hash"] != first.api.inspect_image(base.tag)["Config"]["Labels"][LABELS[0]]


def _cache_tags(registry: str) -> list[str]:
    import urllib.request

    with urllib.request.urlopen(f"http://{registry}/v2/ibcache/tags/list", timeout=30) as answer:  # noqa: S310
        return [f"{registry}/ibcache:{t}" for t in json.load(answer).get("tags") or []]

