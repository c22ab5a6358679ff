"""images/cpu.yaml built through the BuildKit backend on the modern engine (dockerd 26.1 + buildx 0.13.1, started by
scripts/modern-engine.sh; scripts/run-tests.sh exports IMAGEBUILD_BUILDKIT_HOST and IMAGEBUILD_BUILDKIT_DOCKER_CONFIG).

One BuildKit build of the CPU matrix (make test: its base and runtime, what these tests and test_env_layers.py use;
the full tier: every flavor), smoke-tested (`--test`), compared with the classic build the session already has
(conftest.cpu_build, same registry prefix): the same tags, the same label keys, each image's labels its own, the same
record entries, sizes within 2%. Debian 12's 20.10 engine refuses the backend before anything builds.

The full tier (make test-all) starts a second fresh modern engine (own data-root; the OS image given to it as a pulled base would be: `docker save` |
`docker load`) builds the base image again: the same image ID (SOURCE_DATE_EPOCH + rewritten layer dates). It exports
a registry cache of every stage while doing so; emptied of images and build cache (a fresh runner), it then rebuilds
a changed base (one pip package more) and takes every unchanged stage from that cache.
"""

from __future__ import annotations

import base64
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

from imagebuild.builder.backends.buildkit.argv import EXPORT_OPTIONS

LABELS = ("io.imagebuild.inputs-hash", "io.imagebuild.source-date-epoch")


def _content_bytes(client, ref: str) -> int:
    """`du -sbx /` inside the image (apparent sizes of its files), in a container without network."""
    out = client.containers.run(ref, ["-sbx", "/"], entrypoint="du", user="0", network_mode="none", remove=True)
    return int(out.split()[0])


def _record(state: Path) -> dict:
    """The CPU matrix's record in `state` (other tests of the session record other matrices there)."""
    return json.loads((state / "cpu.state.json").read_text())


def test_buildkit_build_passes_the_smoke_suite(bk_build, provider):
    """The flavors the session's BuildKit build made (make test: base and runtime; the full tier: dev too) were built
    and passed the suite; any other flavor of the matrix was skipped, not built."""
    result, _, tmp = bk_build
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp / "report" / "build-report.json").read_text())
    images = [img for img in report["images"] if img["flavor"] in provider.bk_flavors]
    assert len(images) == len(provider.bk_flavors) and all(img["status"] == "built" for img in images)
    assert all(img["status"] == "skipped" for img in report["images"] if img not in images)
    for img in images:
        tests = img.get("tests") or {}
        assert tests.get("failed", 0) == 0 and tests.get("passed", 0) > 0, img


def test_tags_labels_and_record_match_the_classic_build(bk_build, cpu_build, provider):
    result, client, tmp = bk_build
    assert result.returncode == 0
    images = [i for i in cpu_build.plan.images if i.flavor in provider.bk_flavors]  # what the BuildKit build made
    ids = {}
    for img in images:
        classic = cpu_build.client.api.inspect_image(img.tag)
        bk = client.api.inspect_image(img.tag)  # the same tag, in the modern engine's store
        ids[img.tag] = bk["Id"]
        assert set(bk["Config"]["Labels"]) == set(classic["Config"]["Labels"]), img.tag
        # sizes within 2%: the bytes of the image's files (the stores' own figures differ in kind: the containerd
        # store's `Size` is the compressed content, its history sizes are disk blocks)
        bk_size, classic_size = _content_bytes(client, img.tag), _content_bytes(cpu_build.client, img.tag)
        assert abs(bk_size - classic_size) <= 0.02 * classic_size, (img.tag, bk_size, classic_size)
    for img in images:  # each image stands on its parent: the parent's layers, then its own
        layers = client.api.inspect_image(img.tag)["RootFS"]["Layers"]
        if img.parent:
            below = client.api.inspect_image(ids[img.parent])["RootFS"]["Layers"]
            assert layers[:len(below)] == below and len(layers) > len(below), img.tag
    hashes = [client.api.inspect_image(i.tag)["Config"]["Labels"][LABELS[0]] for i in images]
    assert len(set(hashes)) == len(images)
    bk_record = _record(tmp / "state")
    classic_record = _record(Path(os.environ["IMAGEBUILD_STATE_DIR"]))
    assert set(bk_record["images"]) == {key for key, entry in classic_record["images"].items()
                                        if entry["flavor"] in provider.bk_flavors}
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


def test_the_pushed_digest_is_the_image_the_build_made(bk_build, cpu_build, tmp_path):
    """The BuildKit backend's images are zstd with OCI media types in the engine (EXPORT_OPTIONS), so `push` sends
    the engine's own manifest and blobs (push/asheld.py): nothing is compressed (the layer cache stays empty), and the
    registry serves, under every tag, the digest that is the engine's image ID, with zstd layers only. The base
    (~60 MB), to a repository of this test's own."""
    result, client, tmp = bk_build
    assert result.returncode == 0
    base = next(i for i in cpu_build.plan.images if i.flavor == "base")
    image_id = client.api.inspect_image(base.tag)["Id"]
    reg = cpu_build.registry
    prefix = f"{reg.address}/ibheld-{tmp_path.name[-8:].lower()}"
    env = {**_bk_env(tmp / "state"), "IMAGEBUILD_REGISTRY_USER": reg.user, "IMAGEBUILD_REGISTRY_PASSWORD": reg.password,
           "IMAGEBUILD_LAYER_CACHE": str(tmp_path / "layer-cache")}
    pushed = imagebuild("push", "--matrix", cpu_build.args()[1], "--registry", prefix, "--only", "base",
                        "--report-dir", str(tmp_path / "report"), env=env, timeout=600)
    assert pushed.returncode == 0, pushed.stdout[-3000:] + pushed.stderr[-3000:]
    assert "zstd layers as the engine holds them (nothing compressed)" in pushed.stdout + pushed.stderr
    assert not (tmp_path / "layer-cache").exists()  # nothing went through the compressor
    row = next(r for r in json.loads((tmp_path / "report" / "build-report.json").read_text())["images"]
               if r["flavor"] == "base")
    assert row["push"]["digest"] == image_id and row["push"]["status"] == "pushed", row["push"]
    from imagebuild.oci import Reference, RegistryAuth, RegistryClient

    registry = RegistryClient(RegistryAuth(reg.address, reg.user, reg.password))
    for tag in row["push"]["tags"]:
        ref = Reference.parse(tag)
        got = registry.manifest(ref.repository, str(ref.tag))
        assert got is not None, tag
        digest, doc = got
        assert digest == image_id, tag
        assert {layer["mediaType"] for layer in doc["layers"]} == {"application/vnd.oci.image.layer.v1.tar+zstd"}


def test_a_push_copies_out_of_the_kept_archive_only_the_layers_the_registry_lacks(bk_build, cpu_build, tmp_path):
    """The archives the session's BuildKit build kept (engine/held.py, this run's layer cache): the base pushed, then
    the runtime into the same repository, which holds the base's layers by then: only the runtime's own layers are
    copied out of its archive (push/asheld.py `lazy`), and each digest the registry serves is the image ID."""
    import re

    result, client, tmp = bk_build
    assert result.returncode == 0
    reg = cpu_build.registry
    prefix = f"{reg.address}/iblazy-{tmp_path.name[-8:].lower()}"
    env = {**_bk_env(tmp / "state"), "IMAGEBUILD_REGISTRY_USER": reg.user, "IMAGEBUILD_REGISTRY_PASSWORD": reg.password}
    copied = {}
    for flavor in ("base", "runtime"):
        image_id = client.api.inspect_image(cpu_build.tag(flavor))["Id"]
        pushed = imagebuild("push", "--matrix", cpu_build.args()[1], "--registry", prefix, "--only", flavor,
                            "--report-dir", str(tmp_path / flavor), env=env, timeout=600)
        out = pushed.stdout + pushed.stderr
        assert pushed.returncode == 0, out[-3000:]
        row = next(r for r in json.loads((tmp_path / flavor / "build-report.json").read_text())["images"]
                   if r["flavor"] == flavor)
        assert row["push"]["digest"] == image_id and row["push"]["status"] == "pushed", row["push"]
        found = re.search(r"(\d+) of (\d+) layers copied out of the archive the build kept", out)
        assert found, out[-3000:]
        copied[flavor] = (int(found.group(1)), int(found.group(2)))
    assert copied["base"][0] == copied["base"][1]  # a first push: every layer
    base_layers = copied["base"][1]
    assert copied["runtime"][0] == copied["runtime"][1] - base_layers > 0, copied  # the base's are there already


def test_a_held_image_through_a_flaky_registry_is_retried_to_the_same_digest(bk_build, cpu_build, tmp_path):
    """push/upload.py's own sender (the BuildKit path), through a proxy that resets one blob's upload halfway and
    answers another blob's PUT with 503: each a transient failure, retried by the one policy (only what is still
    missing is sent again), and the registry, asked directly, serves the image ID under the tag."""
    from faultproxy import Fault, FaultProxy

    from imagebuild.oci import Reference, RegistryAuth, RegistryClient

    result, client, tmp = bk_build
    assert result.returncode == 0
    reg = cpu_build.registry
    host, port = reg.address.split(":")
    image_id = client.api.inspect_image(cpu_build.tag("base"))["Id"]
    faults = [Fault("reset-upload"), Fault("503", lambda r: r.method == "PUT" and "/blobs/uploads/" in r.path)]
    with FaultProxy((host, int(port)), faults) as proxy:
        prefix = f"{proxy.address}/ibflaky-{tmp_path.name[-8:].lower()}"
        env = {**_bk_env(tmp / "state"), "IMAGEBUILD_REGISTRY_USER": reg.user,
               "IMAGEBUILD_REGISTRY_PASSWORD": reg.password}
        pushed = imagebuild("push", "--matrix", cpu_build.args()[1], "--registry", prefix, "--only", "base",
                            "--report-dir", str(tmp_path / "report"), env=env, timeout=600)
        out = pushed.stdout + pushed.stderr
        assert pushed.returncode == 0, out[-3000:]
        assert "as the engine holds them" in out and "retry 1/" in out, out[-3000:]
        assert proxy.pending_faults() == []
        actions = [e.action for e in proxy.log]
        assert actions.count("reset-upload") == 1 and actions.count("503") == 1, actions
    row = next(r for r in json.loads((tmp_path / "report" / "build-report.json").read_text())["images"]
               if r["flavor"] == "base")
    assert row["push"]["status"] == "pushed" and row["push"]["digest"] == image_id and row["push"]["attempts"] >= 2
    direct = RegistryClient(RegistryAuth(reg.address, reg.user, reg.password))
    for tag in row["push"]["tags"]:
        ref = Reference.parse(tag)
        assert direct.manifest_digest(ref.repository, str(ref.tag)) == image_id, tag


def test_a_held_image_goes_up_over_tls_with_auth_to_the_same_digest(bk_build, cpu_build, tmp_path):
    """push/upload.py's own sender over TLS (the registry's own CA, --ca-file; 1 MiB blocks, not sendfile) with
    htpasswd auth: the registry, asked directly over TLS, serves the image ID under every tag; a wrong password is one
    auth `error:` line and writes nothing."""
    from imagebuild.oci import Reference, RegistryAuth, RegistryClient

    result, client, tmp = bk_build
    assert result.returncode == 0
    image_id = client.api.inspect_image(cpu_build.tag("base"))["Id"]
    info = start_registry("tls-user", "tls-pw-Rz8", "--tls")
    try:
        address, ca = info["REGISTRY"], info["REGISTRY_CA"]
        prefix = f"{address}/ibtls-{tmp_path.name[-8:].lower()}"
        args = ("push", "--matrix", cpu_build.args()[1], "--registry", prefix, "--only", "base", "--ca-file", ca)
        env = {**_bk_env(tmp / "state"), "IMAGEBUILD_REGISTRY_USER": "tls-user"}
        refused = imagebuild(*args, "--report-dir", str(tmp_path / "refused"),
                             env={**env, "IMAGEBUILD_REGISTRY_PASSWORD": "not-the-password"}, timeout=600)
        out = refused.stdout + refused.stderr
        assert refused.returncode != 0 and "error:" in out and "Traceback" not in out, out[-3000:]
        assert "not-the-password" not in out
        direct = RegistryClient(RegistryAuth(address, "tls-user", "tls-pw-Rz8"), ca_file=ca)
        repository = Reference.parse(cpu_build.tag("base").replace(cpu_build.prefix, prefix, 1)).repository
        assert direct.manifest_digest(repository, image_id) is None  # nothing written under the wrong password
        pushed = imagebuild(*args, "--report-dir", str(tmp_path / "report"),
                            env={**env, "IMAGEBUILD_REGISTRY_PASSWORD": "tls-pw-Rz8"}, timeout=600)
        out = pushed.stdout + pushed.stderr
        assert pushed.returncode == 0, out[-3000:]
        assert "as the engine holds them" in out, out[-3000:]
        row = next(r for r in json.loads((tmp_path / "report" / "build-report.json").read_text())["images"]
                   if r["flavor"] == "base")
        assert row["push"]["status"] == "pushed" and row["push"]["digest"] == image_id, row["push"]
        for tag in row["push"]["tags"]:
            ref = Reference.parse(tag)
            assert direct.manifest_digest(ref.repository, str(ref.tag)) == image_id, tag
    finally:
        stop_registry(info)


def test_a_held_image_signed_beside_its_upload_verifies_by_digest(bk_build, cpu_build, cosign, tmp_path):
    """The BuildKit path signed: the digest signed and attested while imagebuild's own upload sends the blobs
    (push/pusher.py, push/upload.py); once the tags point at it, `imagebuild verify` and cosign itself accept the
    signature and both attestations for exactly the image ID."""
    from _helpers import cosign_key_pair

    result, client, tmp = bk_build
    assert result.returncode == 0
    reg = cpu_build.registry
    image_id = client.api.inspect_image(cpu_build.tag("base"))["Id"]
    prefix_key = cosign_key_pair(cosign, tmp_path / "signer", "held-signing-pw")
    key, public = prefix_key.with_suffix(".key"), prefix_key.with_suffix(".pub")
    prefix = f"{reg.address}/ibsigned-{tmp_path.name[-8:].lower()}"
    env = {**_bk_env(tmp / "state"), "IMAGEBUILD_REGISTRY_USER": reg.user, "IMAGEBUILD_REGISTRY_PASSWORD": reg.password,
           "COSIGN_PASSWORD": "held-signing-pw"}
    pushed = imagebuild("push", "--matrix", cpu_build.args()[1], "--registry", prefix, "--only", "base", "--sign-key",
                        str(key), "--report-dir", str(tmp_path / "report"), env=env, timeout=600)
    out = pushed.stdout + pushed.stderr
    assert pushed.returncode == 0, out[-3000:]
    assert "as the engine holds them" in out and "signed (+ SBOM and provenance attestations)" in out, out[-3000:]
    row = next(r for r in json.loads((tmp_path / "report" / "build-report.json").read_text())["images"]
               if r["flavor"] == "base")
    assert row["push"]["digest"] == image_id and row["push"]["signed"], row["push"]
    tag = row["push"]["tags"][0]
    verified = imagebuild("verify", tag, "--key", str(public), env=env, timeout=300)
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
    config = tmp_path / "docker-config"  # cosign's own way to the registry's credentials
    config.mkdir()
    token = base64.b64encode(f"{reg.user}:{reg.password}".encode()).decode()
    (config / "config.json").write_text(json.dumps({"auths": {reg.address: {"auth": token}}}))
    by_cosign = subprocess.run([cosign, "verify", "--key", str(public), "--insecure-ignore-tlog",
                                "--allow-http-registry", f"{tag.rsplit(':', 1)[0]}@{image_id}"],
                               capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                               env={**os.environ, "DOCKER_CONFIG": str(config)})
    assert by_cosign.returncode == 0, by_cosign.stderr[-2000:]


def test_the_files_read_layer_by_layer_are_the_files_the_engine_exports(bk_build, cpu_build):
    """The build's SBOM read the runtime layer by layer from the archive the build kept (inventory/layered.py), each
    layer's picks kept by diff ID in the build's state (what a one-package rebuild reuses): those files are exactly
    what the engine's export of the image gives (the whole filesystem, the path every other image takes)."""
    from imagebuild.engine import held
    from imagebuild.inventory import layered, read_files

    result, client, tmp = bk_build
    assert result.returncode == 0
    image_id = client.api.inspect_image(cpu_build.tag("runtime"))["Id"]
    assert held.find(image_id) is not None, "the build kept no archive of the runtime"
    layers = client.api.inspect_image(image_id)["RootFS"]["Layers"]
    kept_by_build = {p.parent.name for p in (tmp / "state" / "derived").glob("*/layer-picks-*")}
    assert {d.removeprefix("sha256:") for d in layers} <= kept_by_build  # the build's SBOM took this path
    picks: dict[str, bytes] = {}

    class Store:
        get, put = picks.get, picks.__setitem__

    from_layers = layered.held_files(image_id, Store())
    assert from_layers is not None and len(picks) == len(set(layers))
    exported = read_files(client, image_id)
    assert from_layers == exported
    assert {p.name for p in exported.pythons} >= {"torch", "numpy"} and len(exported.debs) > 50


@pytest.mark.parametrize("flavors", [
    # make test: the runtime target (and the base it needs): one build of the runtime with its env stage in line
    # gives the image build made with the env stage as an image of its own (envimage.py); ~1 min of export
    pytest.param(("base", "runtime"), id="runtime"),
    # every archive (~3 min), of the BuildKit build's every flavor (cpu_images("bk_dev"))
    pytest.param(("base", "runtime", "dev"), id="matrix", marks=[pytest.mark.full_tier,
                                                                 pytest.mark.cpu_images("bk_dev")]),
])
def test_a_real_bake_of_the_exported_compose_file_agrees_with_build(bk_build, cpu_build, tmp_path, flavors):
    """`imagebuild bake` -> `docker buildx bake` on the modern engine (no bridge: host networking) of the CPU matrix
    (make test bakes its base target; the full tier all three), with the inputs bk_build built it from. The engine's docker driver exports each target as an archive
    (rewrite-timestamp, as build does), loaded here under tags of the test's own so the session's tags stay. Each
    image is the very image build made (the same ID: the tier copies are `COPY --link`, so a child's layers do not
    depend on whether its parent was loaded or chained inside the bake); every image carries exactly build's labels
    (source date, CREATED, REVISION: no parent ID among them) and stands on the bake's parent by its layers, which is
    what `imagebuild build` asks of an image to find it up to date. A credentialed index never reaches the file."""
    import yaml

    result, client, bk_dir = bk_build
    assert result.returncode == 0
    built = {r["flavor"]: r["image_id"]
             for r in json.loads((bk_dir / "report" / "build-report.json").read_text())["images"]}
    inputs = ("--wheelhouse", os.environ.get("IMAGEBUILD_WHEELHOUSE", "/opt/wheels"),
              "--ca-cert", os.environ.get("IMAGEBUILD_CA_CERT", "/etc/ssl/certs/ca-certificates.crt"),
              "--torch-index-url", "none")
    secret = "https://bakeuser:bake-Pa55@127.0.0.1:9/simple"
    (tmp_path / "secret").mkdir()
    exported = imagebuild("bake", *cpu_build.args(*inputs, "--pip-extra-index-url", secret, "-o",
                                                  str(tmp_path / "secret" / "docker-bake.yml")),
                          env=_bk_env(tmp_path / "state"))
    assert exported.returncode == 0, exported.stderr
    assert "bake-Pa55" not in (tmp_path / "secret" / "docker-bake.yml").read_text() + exported.stderr

    out = tmp_path / "docker-bake.yml"
    exported = imagebuild("bake", *cpu_build.args(*inputs, "-o", str(out)), env=_bk_env(tmp_path / "state"))
    assert exported.returncode == 0, exported.stderr
    services = yaml.safe_load(out.read_text())["services"]
    assert len(services) == 3 and all(s["build"]["network"] == "host" for s in services.values())
    outputs = [s["build"]["x-bake"]["output"][0] for s in services.values()]
    assert all(o.startswith("type=docker,dest=bake-images/") and o.endswith(f",{EXPORT_OPTIONS}") for o in outputs)
    assert "docker load" in exported.stderr  # the export says what to do with the archives
    flavor_of = {name: s["build"]["labels"]["io.imagebuild.flavor"] for name, s in services.items()}
    # the targets baked: the flavors asked (a bake of one target builds only what it needs)
    own = {name: f"ibbake-{flavor_of[name]}:{tmp_path.name[-12:].lower()}" for name in services
           if flavor_of[name] in flavors}
    env = {**os.environ, **_bk_env(tmp_path / "state")}
    sets = [arg for name, tag in own.items() for arg in ("--set", f"{name}.tags={tag}")]
    baked = subprocess.run(["docker", "buildx", "bake", "-f", out.name, "--provenance=false", "--progress", "plain",
                            *sets, *own], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800,
                           check=False)
    assert baked.returncode == 0, baked.stderr[-3000:]
    try:
        for archive in sorted((tmp_path / "bake-images").glob("*.tar")):
            loaded = subprocess.run(["docker", "load", "-i", str(archive)], env=env, capture_output=True, text=True,
                                    timeout=600, check=False)
            assert loaded.returncode == 0, loaded.stderr
        info = {flavor_of[name]: client.api.inspect_image(tag) for name, tag in own.items()}
        ids = {flavor: i["Id"] for flavor, i in info.items()}
        print("\n[bake] image IDs bake / build: " + ", ".join(f"{f} {ids[f][7:19]} / {built[f][7:19]}" for f in ids))
        assert ids == {f: built[f] for f in flavors}  # the very images build made, each one baked
        for flavor, parent in (("runtime", "base"), ("dev", "runtime")):
            if flavor not in info:
                continue
            mine = client.api.inspect_image(built[flavor])
            assert info[flavor]["Config"]["Labels"] == mine["Config"]["Labels"], flavor  # build's labels exactly
            below = info[parent]["RootFS"]["Layers"]
            assert info[flavor]["RootFS"]["Layers"][:len(below)] == below, flavor  # stands on the bake's parent
    finally:
        for tag in own.values():  # the test's tags only (an image build made keeps its own tags)
            if _has(client, tag):
                client.api.remove_image(tag)


def _has(client, ref: str) -> bool:
    try:
        client.api.inspect_image(ref)
        return True
    except Exception:
        return False


# -- a second fresh engine: the same base image ID, then a registry cache for a changed image ---------------------

def second_engine_test(test):
    """A test on a second fresh modern engine: the full tier's (make test-all); ~2 minutes of base builds."""
    for mark in (pytest.mark.full_tier, pytest.mark.fresh_engine, pytest.mark.cold_build):
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def second_engine(bk_build, cpu_build):
    """A fresh dockerd 26.1 of its own (scripts/modern-engine.sh --fresh), with the first engine's OS image of the
    CPU matrix's base loaded, and a registry without auth for the BuildKit cache. Both stopped and deleted
    afterwards."""
    import docker

    from imagebuild.builder import bootstrap

    result, first, _ = bk_build
    assert result.returncode == 0
    [base] = [i for i in cpu_build.plan.images if i.flavor == "base"]
    os_tag = bootstrap.spec_for(base.variant).tag  # by its tag: the full tier's arm64 build adds another OS image
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
        assert os_tag in os_tags, f"the first engine has no bootstrapped OS image {os_tag}: {os_tags}"
        second.images.load(first.api.get_image(os_tag))
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


@pytest.fixture(scope="module")
def second_base(cpu_build, second_engine, tmp_path_factory):
    """The base built once on the second engine, exporting a registry cache of every stage: (the run, the engine's
    inspect of the image it made, read right after the build: the test that empties the engine may run first)."""
    host, second, _, registry = second_engine
    result = _build_base(cpu_build, host, tmp_path_factory.mktemp("bk2-base"), f"{registry}/ibcache")
    [base] = [i for i in cpu_build.plan.images if i.flavor == "base"]
    return result, (second.api.inspect_image(base.tag) if result.returncode == 0 else None)


@second_engine_test
def test_a_second_fresh_engine_builds_the_same_base_image_id(bk_build, second_engine, second_base):
    _, _, first, _ = second_engine
    result, two = second_base
    assert result.returncode == 0, result.stderr[-3000:]
    # the first engine's base by the ID its build reported: the bake test re-tags the base with its own build
    report = json.loads((bk_build[2] / "report" / "build-report.json").read_text())
    [first_id] = [img["image_id"] for img in report["images"] if img["flavor"] == "base"]
    one = first.api.inspect_image(first_id)
    assert one["Config"]["Labels"] == two["Config"]["Labels"]
    layers = list(zip(one["RootFS"]["Layers"], two["RootFS"]["Layers"], strict=False))
    assert [n for n, (a, b) in enumerate(layers) if a != b] == [], "layers that differ (by index)"
    assert one["Id"] == two["Id"]


@second_engine_test
def test_a_changed_image_on_an_emptied_engine_takes_its_unchanged_stages_from_the_registry_cache(
        cpu_build, second_engine, second_base, tmp_path):
    host, second, first, registry = second_engine
    cache = f"{registry}/ibcache"
    [base] = [i for i in cpu_build.plan.images if i.flavor == "base"]
    assert second_base[0].returncode == 0, second_base[0].stderr[-3000:]
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

