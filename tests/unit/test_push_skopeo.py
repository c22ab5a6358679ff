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
