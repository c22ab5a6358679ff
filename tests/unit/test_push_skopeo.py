"""push/skopeo.py: skopeo's flags, messages and auth file; a real `skopeo copy` of the fake engine's saved image
into an OCI layout (zstd media types, the engine's config kept, the same digest twice); error classification."""

from __future__ import annotations

import json
import stat

import pytest
from _fake_engine import FakeEngine

from imagebuild.oci import RegistryAuth
from imagebuild.push import classify
from imagebuild.push.pusher import refused_message
from imagebuild.push.skopeo import (
    CopyError,
    Skopeo,
    auth_file_doc,
    compress_args,
    refused_format,
    skopeo_message,
)


def test_compress_args_per_choice():
    assert compress_args("zstd") == ["--format", "oci", "--dest-compress", "--dest-compress-format", "zstd",
                                     "--dest-compress-level", "3"]
    assert compress_args("gzip") == ["--format", "v2s2", "--dest-compress", "--dest-compress-format", "gzip"]
    with pytest.raises(CopyError, match="choose one of zstd, gzip"):
        compress_args("lz4")


def test_auth_file_holds_credentials_anonymous_holds_none():
    doc = auth_file_doc(RegistryAuth("reg:5000", "alice", "pw-secret-9"))
    assert json.loads(json.dumps(doc))["auths"]["reg:5000"]["auth"] == "YWxpY2U6cHctc2VjcmV0LTk="
    token = auth_file_doc(RegistryAuth("reg:5000", None, None, identity_token="tok-1"))["auths"]["reg:5000"]
    assert token["identitytoken"] == "tok-1"
    assert auth_file_doc(RegistryAuth("reg:5000")) == {"auths": {}}


def test_skopeo_message_takes_the_fatal_text_and_redacts():
    err = ('Getting image source signatures\ntime="2026-12-02T04:53:45Z" level=fatal msg="writing manifest: '
           'uploading manifest sha256:ab to 127.0.0.1:5/x: manifest invalid: manifest invalid"\n')
    assert skopeo_message(err) == ("writing manifest: uploading manifest sha256:ab to 127.0.0.1:5/x: manifest invalid: "
                                   "manifest invalid")
    assert skopeo_message("plain last line\n") == "plain last line"
    assert ":pw@" not in skopeo_message('level=fatal msg="GET https://u:pw@reg/v2/: 500"')


@pytest.mark.parametrize("message,refused", [
    ("writing manifest: uploading manifest sha256:ab to r/x: manifest invalid: manifest invalid", True),
    ("uploading manifest: unsupported: The operation is unsupported.", True),
    ("received unexpected HTTP status: 415 Unsupported Media Type", True),
    ("received unexpected HTTP status: 503 Service Unavailable", False),
    ("unauthorized: authentication required", False),
])
def test_refused_format(message, refused):
    assert refused_format(message) is refused


def test_refused_message_is_one_line_naming_gzip():
    text = refused_message("reg:5000", "zstd", "manifest invalid")
    assert "\n" not in text and "reg:5000" in text and "--compression gzip" in text and "nothing was tagged" in text


def test_prepare_with_real_skopeo_keeps_the_engine_config_and_is_deterministic(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_PUSH_TMP", str(tmp_path))
    engine = FakeEngine()
    image_id = engine.add_image("reg:5000/x:1", {"io.imagebuild.flavor": "base"})
    saved = b"".join(engine.save(image_id))
    copier = Skopeo(engine)
    first = copier.prepare(image_id, "zstd")
    again = copier.prepare(image_id, "zstd")
    assert first.digest == again.digest  # zstd level 3 is deterministic: an unchanged image keeps its digest
    assert [m for _, _, m in first.layers] == ["application/vnd.oci.image.layer.v1.tar+zstd"]
    assert first.media_type == "application/vnd.oci.image.manifest.v1+json"
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(saved)) as tar:
        engine_config = tar.extractfile("config.json").read()  # type: ignore[union-attr]
    import hashlib

    assert first.config[0] == "sha256:" + hashlib.sha256(engine_config).hexdigest()  # not skopeo's OCI rewrite
    gz = copier.prepare(image_id, "gzip")
    assert [m for _, _, m in gz.layers] == ["application/vnd.docker.image.rootfs.diff.tar.gzip"]
    assert gz.config == first.config
    work = copier.work
    assert stat.S_IMODE(work.stat().st_mode) == 0o700
    copier.close()
    assert not work.exists()


def test_a_missing_skopeo_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_PUSH_TMP", str(tmp_path))
    engine = FakeEngine()
    image_id = engine.add_image("reg:5000/x:1", {})
    copier = Skopeo(engine, binary=str(tmp_path / "no-skopeo"))
    with pytest.raises(CopyError, match="apt-get install skopeo"):
        copier.prepare(image_id, "zstd")
    copier.close()


@pytest.mark.parametrize("message,kind", [
    ("unauthorized: authentication required", "auth"),
    ("denied: requested access to the resource is denied", "auth"),
    ("received unexpected HTTP status: 401 Unauthorized", "auth"),
    ("received unexpected HTTP status: 403 Forbidden", "auth"),
    ("received unexpected HTTP status: 503 Service Unavailable", "transient"),
    ("received unexpected HTTP status: 500 Internal Server Error", "transient"),
    ("toomanyrequests: Rate exceeded", "transient"),
    ("Patch http://r/v2/x/blobs/uploads/u: read: connection reset by peer", "transient"),
    ("net/http: TLS handshake timeout", "transient"),
    ("Put http://r/v2/x/blobs/uploads/u: EOF", "transient"),
    ("unexpected EOF", "transient"),
    ("blob upload unknown: blob upload unknown to registry", "transient"),
    ("dial tcp 127.0.0.1:5000: connect: connection refused", "transient"),
    ("manifest invalid: manifest invalid", "fatal"),
    ("tag does not exist: x:y", "fatal"),
    ("name unknown: repository name not known to registry", "fatal"),
])
def test_classify(message, kind):
    assert classify(message) == kind


def test_catalog_states_what_a_tag_needs_from_its_layer_media_types():
    from imagebuild.catalog.collect import GZIP_NEEDS, ZSTD_NEEDS, runtime_needs

    assert runtime_needs(["application/vnd.oci.image.layer.v1.tar+zstd"]) == ZSTD_NEEDS
    assert "Docker ≥ 23" in ZSTD_NEEDS and "containerd ≥ 1.5" in ZSTD_NEEDS
    assert runtime_needs(["application/vnd.docker.image.rootfs.diff.tar.gzip"]) == GZIP_NEEDS
    assert "foreign" in runtime_needs(["application/vnd.example.foreign"])


def test_zstd_layer_read_like_a_gzip_one():
    import io
    import tarfile

    import zstandard

    from imagebuild.inventory import tarpick

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b'ID=debian\nVERSION_ID="12"\n'
        member = tarfile.TarInfo("etc/os-release")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    frames = zstandard.ZstdCompressor(level=3).compress(buf.getvalue()[:1024]) + \
        zstandard.ZstdCompressor(level=3).compress(buf.getvalue()[1024:])  # two frames, as a compressor may write
    collector = tarpick.Collector()
    collector.add_layer(io.BytesIO(frames), "zst")
    assert tarpick.os_release(collector.files).id == "debian"
    with pytest.raises(zstandard.ZstdError):
        tarpick.Collector().add_layer(io.BytesIO(b"not zstd at all" * 10), "zst")


@pytest.mark.parametrize("value,problem", [
    ("gzip", None), ("zstd", None), ({"old.example:5000": "gzip"}, None),
    ("lz4", "expected zstd or gzip"), ({"old.example:5000": "brotli"}, "expected zstd or gzip"),
])
def test_matrix_compression_key(tmp_path, value, problem):
    import yaml

    from imagebuild.matrix import load_matrix

    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "compression": value, "matrix": {"torch": ["2.9.1"],
                                                                                   "cuda": ["cpu"]}}))
    doc = load_matrix(path)
    texts = [str(p) for p in doc.problems]
    if problem is None:
        assert not [t for t in texts if ": compression" in t], texts
        assert doc.compression == (value if isinstance(value, dict) else {"*": value})
    else:
        assert any(problem in t and ": compression" in t for t in texts), texts
