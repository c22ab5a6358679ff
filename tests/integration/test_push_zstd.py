"""zstd on the wire, for real: a tiny image pushed by skopeo to Debian's docker-registry with zstd layers and OCI
media types, then pulled by the modern engine (dockerd 26.1, containerd image store; Docker 20.10 cannot pull zstd),
read back without an engine (inventory: the SBOM path); gzip on request; a registry that refuses OCI manifests
(faultproxy) gives one `error:` line naming the gzip option and moves no tag.

Images are tiny `FROM scratch` images on the classic engine (the fixture `docker_client`), named ibdev-push-*.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from imagebuild.inventory.from_registry import read_registry
from imagebuild.oci import Reference, RegistryClient
from imagebuild.push import Pusher

sys.path.insert(0, str(Path(__file__).parent))
from _helpers import USER, Images, auth, image_plan, ns  # noqa: E402
from faultproxy import Fault, FaultProxy  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.registry]

ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
BK_HOST = os.environ.get("IMAGEBUILD_BUILDKIT_HOST", "")


@pytest.fixture
def images(docker_client):
    imgs = Images(docker_client)
    yield imgs
    imgs.cleanup()


@pytest.fixture(scope="module")
def modern_engine():
    if not BK_HOST:
        if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
            pytest.fail("IMAGEBUILD_BUILDKIT_HOST is not set: scripts/run-tests.sh starts the modern engine")
        pytest.skip("no modern engine: set IMAGEBUILD_BUILDKIT_HOST (scripts/modern-engine.sh --fresh DIR)")
    import docker

    client = docker.DockerClient(base_url=BK_HOST, timeout=300)
    yield client
    client.close()


def layer_types(registry: dict, ref: str) -> tuple[str, list[str]]:
    parsed = Reference.parse(ref)
    got = RegistryClient(auth(registry["REGISTRY"])).manifest(parsed.repository, str(parsed.tag))
    assert got is not None, ref
    digest, doc = got
    return digest, [str(layer["mediaType"]) for layer in doc["layers"]]  # type: ignore[index,union-attr]


def test_zstd_push_pulls_on_the_modern_engine_and_reads_back(docker_client, registry, images, modern_engine):
    reg = f"{registry['REGISTRY']}/{ns()}"
    base = image_plan(reg, "base", None)
    payload = os.urandom(5 << 20)  # a blob over the client's 4 MiB answer limit: its HEAD is still read
    images.build({"base.bin": payload, "etc/os-release": b'ID=debian\nVERSION_ID="12"\n'}, None, base.tag)
    image_id = docker_client.api.inspect_image(base.tag)["Id"]
    rec = Pusher(docker_client, auth(registry["REGISTRY"])).push_image(base, [base.tag, *base.aliases])
    assert rec["status"] == "pushed", rec
    assert rec["layer_media_types"] == [ZSTD]
    digest, types = layer_types(registry, base.tag)
    assert digest == rec["digest"] and types == [ZSTD] * len(types)
    parsed = Reference.parse(base.tag)
    manifest = RegistryClient(auth(registry["REGISTRY"])).manifest(parsed.repository, digest)
    assert manifest is not None and manifest[1]["config"]["digest"] == image_id  # type: ignore[index]

    # the modern engine pulls it (zstd: Docker >= 23) by digest
    name = parsed.name
    modern_engine.api.pull(name, digest, auth_config=auth(registry["REGISTRY"]).sdk_auth_config())
    try:
        got = modern_engine.api.inspect_image(f"{name}@{digest}")
        assert got["Config"]["Labels"] is None or "io.imagebuild.inputs-hash" not in (got["Config"]["Labels"] or {})
        files = modern_engine.api.create_container(f"{name}@{digest}", command=["/none"])
        try:
            stream, _ = modern_engine.api.get_archive(files["Id"], "/base.bin")
            import tarfile

            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.extractfile("base.bin")
                assert member is not None and member.read() == payload
        finally:
            modern_engine.api.remove_container(files["Id"], force=True)
    finally:
        modern_engine.api.remove_image(f"{name}@{digest}", force=True)

    # read without an engine (sbom/diff/export of a registry reference): zstd layers streamed and unpacked
    inv = read_registry(RegistryClient(auth(registry["REGISTRY"])), Reference.parse(base.tag))
    assert inv.image_id == image_id and inv.os_release.id == "debian"

    # the same image again: the same digest (deterministic zstd), nothing sent
    again = Pusher(docker_client, auth(registry["REGISTRY"])).push_image(base, [base.tag])
    assert again["status"] == "unchanged" and again["digest"] == digest


def test_gzip_on_request_writes_docker_media_types(docker_client, registry, images):
    reg = f"{registry['REGISTRY']}/{ns()}"
    base = image_plan(reg, "base", None)
    images.build({"base.bin": os.urandom(64 << 10)}, None, base.tag)
    rec = Pusher(docker_client, auth(registry["REGISTRY"]), compression="gzip").push_image(base)
    assert rec["status"] == "pushed", rec.get("error")
    digest, types = layer_types(registry, base.tag)
    assert digest == rec["digest"] and types == [GZIP]
    repo, tag = base.tag.rsplit(":", 1)
    docker_client.api.remove_image(base.tag, force=True)  # the classic engine (20.10) pulls gzip back
    out = list(docker_client.api.pull(repo, tag, stream=True, decode=True,
                                      auth_config=auth(registry["REGISTRY"]).sdk_auth_config()))
    assert not [c for c in out if "error" in c], out


def test_a_registry_refusing_oci_is_one_error_line_and_no_tag(docker_client, registry, images, tmp_path, monkeypatch,
                                                              capsys):
    host, port = registry["REGISTRY"].split(":")
    with FaultProxy((host, int(port)), [Fault("refuse-oci")]) as proxy:
        reg = f"{proxy.address}/{ns()}"
        base = image_plan(reg, "base", None)
        images.build({"base.bin": os.urandom(64 << 10)}, None, base.tag)
        from imagebuild.models import Plan
        from imagebuild.pipeline.located import Located

        image_id = docker_client.api.inspect_image(base.tag)["Id"]
        (tmp_path / "x.yaml").write_text("name: x\n")
        monkeypatch.setenv("IMAGEBUILD_STATE_DIR", str(tmp_path / "state"))  # its own record, in any test order
        monkeypatch.setattr("imagebuild.pipeline.loaded.resolve_matrix_path", lambda m: tmp_path / "x.yaml")
        monkeypatch.setattr("imagebuild.pipeline.loaded.make_plan", lambda *a, **k: Plan("x.yaml", [base]))
        monkeypatch.setattr("imagebuild.pipeline.flow.locate", lambda client, img, rec: Located(image_id))
        from _helpers import PASSWORD

        monkeypatch.setattr(sys, "argv", ["imagebuild", "push", "-m", "x.yaml", "-u", USER, "--password-stdin",
                                          "--untested", "--report-dir", str(tmp_path / "reports")])
        monkeypatch.setattr(sys, "stdin", io.StringIO(PASSWORD + "\n"))
        from imagebuild.cli import main

        with pytest.raises(SystemExit) as exc:
            main()
        assert exc.value.code == 1
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, err
        assert "refused OCI manifests with zstd layers" in errors[0] and "--compression gzip" in errors[0]
        assert "Traceback" not in err and PASSWORD not in err
        assert proxy.pending_faults() == []
        parsed = Reference.parse(base.tag)
        direct = RegistryClient(auth(registry["REGISTRY"]))
        assert direct.manifest_digest(parsed.repository, str(parsed.tag)) is None  # no tag moved
        assert not [e for e in proxy.log if e.method == "PUT" and "/manifests/" in e.path and "sha256:" not in e.path]
