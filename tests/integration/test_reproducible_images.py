"""Reproducible images for real: the same bootstrap on a second, fresh engine gives the same image ID; `build --force`
with unchanged inputs keeps every image ID; a rebuild that misses the engine's cache but reproduces the layers keeps
the previous image.

In `make test` the session's two Debian 12 bootstraps (conftest.cpu_build's on the classic engine, conftest.bk_build's
on the modern one: two mmdebstrap runs, two engines) are compared. The full tier's test bootstraps twice more, on the
classic engine and a private fresh one (scripts/docker-engine.sh --fresh), and compares the image IDs; the --force
test reuses the session's CPU matrix build (cpu_build).
"""

from __future__ import annotations

import dataclasses
import io
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _helpers import ROOT, imagebuild  # noqa: E402

from imagebuild.builder import BuildOptions, bootstrap, build_plan, ociarchive  # noqa: E402
from imagebuild.builder.progress import Progress  # noqa: E402
from imagebuild.compat import load as load_tables  # noqa: E402
from imagebuild.dates import rfc3339  # noqa: E402
from imagebuild.models import BaseSource, ImagePlan, OSInfo, Plan, ResolvedVariant, Versions  # noqa: E402

pytestmark = pytest.mark.integration

ENGINE = ROOT / "scripts" / "docker-engine.sh"


@pytest.fixture
def fresh_engine():
    """A private, empty engine next to the shared one (its own socket and data root), stopped and removed after."""
    if shutil.which("dockerd") is None or os.geteuid() != 0:
        pytest.skip("a private engine needs root and dockerd")
    import docker

    d = Path(tempfile.mkdtemp(prefix="ibr-", dir="/var/tmp"))
    try:
        out = subprocess.run([str(ENGINE), "--fresh", str(d)], capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stderr
        c = docker.DockerClient(base_url=out.stdout.strip().split("DOCKER_HOST=", 1)[1], timeout=900)
        yield c
        c.close()
    finally:
        subprocess.run([str(ENGINE), "--stop", str(d)], capture_output=True, timeout=120)
        shutil.rmtree(d, ignore_errors=True)


def _debian12_spec() -> bootstrap.BootstrapSpec:
    osinfo = load_tables().os["debian12"]
    var = ResolvedVariant(key="k", name="n", registry="", versions=Versions("0", "cpu", "3.11", "debian12"),
                          cuda_tag="cpu", os=osinfo, base=BaseSource(kind="bootstrap"), torch_index_url=None,
                          flavors=("base",), tf32=False, gpu_archs=(), arch_list=(), min_driver=None)
    return dataclasses.replace(bootstrap.spec_for(var), repository=f"ibdev-repro-{secrets.token_hex(4)}-os")


def test_the_sessions_two_engines_bootstrapped_one_layer(cpu_build, bk_build):
    """Two independent mmdebstrap runs of this session, one per engine (each engine's first build found no OS image):
    one layer with one diff ID, the same labels and creation date (the mirror's)."""
    result, modern, folder = bk_build
    assert cpu_build.result.returncode == 0 and result.returncode == 0, result.stderr[-3000:]
    [base] = [img for img in cpu_build.plan.images if img.flavor == "base"]
    spec = bootstrap.spec_for(base.variant)
    for logs in (cpu_build.tmp / "logs", folder / "logs"):  # each build bootstrapped for itself
        assert sorted(logs.rglob(f"bootstrap-debian12-{spec.hash()[:12]}.log")), f"no bootstrap log in {logs}"
    one, two = cpu_build.client.api.inspect_image(spec.tag), modern.api.inspect_image(spec.tag)
    if one["Created"] != two["Created"]:  # the creation date is the mirror's InRelease date
        pytest.skip(f"the Debian mirror changed between the session's two bootstraps ({one['Created']}, "
                    f"{two['Created']}): not the same input")
    assert len(one["RootFS"]["Layers"]) == 1 and one["RootFS"]["Layers"] == two["RootFS"]["Layers"]
    assert one["Config"]["Labels"] == two["Config"]["Labels"]
    print(f"\nbootstrap debian12 on the session's two engines: layer {one['RootFS']['Layers'][0][:19]} twice")


@pytest.mark.full_tier
@pytest.mark.bootstrap
@pytest.mark.fresh_engine
def test_bootstrap_on_a_second_fresh_engine_gives_the_same_image_id(client, fresh_engine, tmp_path):
    spec = _debian12_spec()
    epoch = bootstrap.mirror_epoch(spec)
    if epoch is None:
        pytest.skip("the Debian mirror's InRelease date cannot be read: its bootstraps are not reproducible")
    ids = []
    try:
        for engine in (client, fresh_engine):
            res = bootstrap.ensure_bootstrap(engine, spec, force=True, log_dir=tmp_path)
            ids.append(res.image_id)
        if bootstrap.mirror_epoch(spec) != epoch:
            pytest.skip("the Debian mirror changed between the two bootstraps; run again")
        info = [e.api.inspect_image(i) for e, i in zip((client, fresh_engine), ids, strict=True)]
        assert ids[0] == ids[1], [i["RootFS"]["Layers"] for i in info]
        assert info[0]["Created"] == rfc3339(int(epoch))  # the mirror's date, not the import time
        assert info[0]["Config"]["Labels"][bootstrap.HASH_LABEL] == spec.hash()
        # the existing image is found again by tag and label (no second mmdebstrap)
        again = bootstrap.ensure_bootstrap(fresh_engine, spec, log_dir=tmp_path)
        assert again.reused and again.image_id == ids[0]
        print(f"\nbootstrap debian12 on two engines: {ids[0][:19]} twice (epoch {epoch})")
    finally:
        try:
            client.api.remove_image(spec.tag, force=True)
        except Exception:
            pass


def test_force_rebuild_of_unchanged_inputs_keeps_every_image_id(cpu_build):
    assert cpu_build.result.returncode == 0, cpu_build.result.stdout[-3000:]
    api = cpu_build.client.api
    before = {img.tag: api.inspect_image(img.tag)["Id"] for img in cpu_build.plan.images}
    # the same environment as the fixture's build: a changed proxy setting misses the classic builder's cache for
    # RUN steps (measured on Docker 20.10), and the apt layers it then rebuilds are not reproducible
    again = imagebuild("build", *cpu_build.build_args(), "--force", env={"no_proxy": "ibtest-noproxy.invalid"})
    assert again.returncode == 0, again.stdout[-3000:]
    after = {img.tag: api.inspect_image(img.tag)["Id"] for img in cpu_build.plan.images}
    assert after == before  # the base kept its ID, so no child was built on a new parent
    labels = api.inspect_image(cpu_build.plan.images[0].tag)["Config"]["Labels"]
    assert labels["org.opencontainers.image.created"] == rfc3339(
        int(labels["io.imagebuild.source-date-epoch"]))


def _tiny_plan(os_ref: str, tag: str) -> Plan:
    osinfo = OSInfo("debian12", "debian", "12", "bookworm", "3.11", (), "http://deb.debian.org/debian", "2.36")
    variant = ResolvedVariant(
        key="k", name="ibrepro", registry="", versions=Versions("0", "cpu", "3.11", "debian12"), cuda_tag="cpu",
        os=osinfo, base=BaseSource("registry", ref=os_ref), torch_index_url=None, flavors=("base",), tf32=False,
        gpu_archs=(), arch_list=(), min_driver=None)
    dockerfile = "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY root/ /\nARG CREATED\nLABEL created=${CREATED}\n"
    img = ImagePlan(id="k-base", tag=tag, flavor="base", parent=None, variant=variant, dockerfile=dockerfile,
                    build_args={}, context_files={"root/opt/hello.txt": b"hello\n"},
                    labels={"io.imagebuild.flavor": "base"}, inputs_hash="sha256:" + "ab" * 32)
    return Plan("t.yaml", [img])


def test_rebuild_that_misses_the_cache_but_reproduces_keeps_the_previous_image(client, tmp_path):
    """Without the engine's build cache (the image came back from `docker save`/`load`), a --force rebuild makes a
    new image with the same layers: the previous one is kept and the new one removed."""
    repo = f"ibdev-repro-{secrets.token_hex(4)}"
    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        info = tarfile.TarInfo("etc/os-release")
        data = b"ID=ibrepro\n"
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    config = ociarchive.image_config(diff_id=ociarchive.file_digest(layer), epoch=1_700_000_000,
                                     architecture=ociarchive.host_architecture(), labels={}, env=["PATH=/bin"],
                                     cmd=["sh"], created_by="test")
    os_ref = f"{repo}/os:1"
    ociarchive.write_docker_archive(tmp_path / "os.tar", layer, config, os_ref)
    ociarchive.load_archive(client, tmp_path / "os.tar", "the test OS image")
    tag = f"{repo}/img:base"
    plan = _tiny_plan(os_ref, tag)
    opts = dict(log_dir=tmp_path / "logs", check_disk=False, proxies={}, tag_aliases=False, revision="r1")
    try:
        first = build_plan(client, plan, BuildOptions(**opts), Progress())[0]
        assert first.status == "built", first.error
        saved = tmp_path / "img.tar"
        with open(saved, "wb") as fh:
            for chunk in client.api.get_image(tag):
                fh.write(chunk)
        client.api.remove_image(tag)  # the image and its build cache (intermediate images) go
        ociarchive.load_archive(client, saved, "the saved image")
        assert client.api.inspect_image(tag)["Id"] == first.image_id
        again = build_plan(client, plan, BuildOptions(force=True, **{**opts, "revision": "r2"}), Progress())[0]
        assert again.status == "built" and again.reproduced_from and again.reproduced_from != first.image_id
        assert again.image_id == first.image_id == client.api.inspect_image(tag)["Id"]
        import docker

        with pytest.raises(docker.errors.ImageNotFound):
            client.api.inspect_image(again.reproduced_from)
    finally:
        for ref in (tag, os_ref):
            try:
                client.api.remove_image(ref, force=True)
            except Exception:
                pass
