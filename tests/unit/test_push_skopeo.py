"""push/skopeo.py + push/compress.py: the fake engine's saved image compressed layer by layer through the cache
into a `dir:` folder (zstd/OCI or gzip/Docker media types, the engine's config kept, the same digest twice and on a
fresh cache) that real skopeo copies byte for byte; a damaged cache blob, a layer that is not its diff ID; skopeo's
messages, auth file and error classification."""

from __future__ import annotations

import json
import stat

import pytest
from _fake_engine import FakeEngine

from imagebuild.oci import RegistryAuth
from imagebuild.push import classify
from imagebuild.push.compress import LayerCache
from imagebuild.push.failures import refused_message
from imagebuild.push.skopeo import (
    CopyError,
    Skopeo,
    auth_file_doc,
    refused_format,
    skopeo_message,
)


def test_prepare_refuses_an_unknown_compression(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_PUSH_TMP", str(tmp_path))
    engine = FakeEngine()
    image_id = engine.add_image("reg:5000/x:1", {})
    with pytest.raises(CopyError, match="choose one of zstd, gzip"):
        Skopeo(engine, cache=LayerCache(tmp_path / "cache")).prepare(image_id, "lz4")


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


def test_prepare_keeps_the_engine_config_is_deterministic_and_real_skopeo_reads_it(tmp_path, monkeypatch):
    import hashlib
    import io
    import subprocess
    import tarfile

    monkeypatch.setenv("IMAGEBUILD_PUSH_TMP", str(tmp_path))
    engine = FakeEngine()
    image_id = engine.add_image("reg:5000/x:1", {"io.imagebuild.flavor": "base"})
    saved = b"".join(engine.save(image_id))
    copier = Skopeo(engine, cache=LayerCache(tmp_path / "cache"))
    first = copier.prepare(image_id, "zstd")
    again = copier.prepare(image_id, "zstd")
    assert first.digest == again.digest  # zstd level 3 is deterministic: an unchanged image keeps its digest
    assert (first.reused, again.reused) == (0, 1)  # the second time its layer came from the cache
    assert [m for _, _, m in first.layers] == ["application/vnd.oci.image.layer.v1.tar+zstd"]
    assert first.media_type == "application/vnd.oci.image.manifest.v1+json"
    with tarfile.open(fileobj=io.BytesIO(saved)) as tar:
        engine_config = tar.extractfile("config.json").read()  # type: ignore[union-attr]
    assert first.config[0] == "sha256:" + hashlib.sha256(engine_config).hexdigest()  # the engine's own bytes
    # a fresh cache (another machine) compresses to the same blob
    other = Skopeo(engine, cache=LayerCache(tmp_path / "cache2")).prepare(image_id, "zstd")
    assert other.digest == first.digest and other.reused == 0
    # the layout is what skopeo reads and sends: copied by real skopeo with --preserve-digests, byte for byte
    out = tmp_path / "copied"
    subprocess.run(["skopeo", "copy", "--quiet", "--preserve-digests", f"dir:{again.layout}", f"dir:{out}"],
                   check=True, capture_output=True, timeout=120)
    assert (out / "manifest.json").read_bytes() == again.manifest
    gz = copier.prepare(image_id, "gzip")
    assert [m for _, _, m in gz.layers] == ["application/vnd.docker.image.rootfs.diff.tar.gzip"]
    assert gz.media_type == "application/vnd.docker.distribution.manifest.v2+json" and gz.config == first.config
    work = copier.work
    assert stat.S_IMODE(work.stat().st_mode) == 0o700
    copier.close()
    assert not work.exists()


def test_a_saved_layer_that_is_not_its_diff_id_and_a_damaged_cache_blob(tmp_path, monkeypatch):
    import json as _json

    from imagebuild.push.compress import LayerCache as Cache

    monkeypatch.setenv("IMAGEBUILD_PUSH_TMP", str(tmp_path))
    engine = FakeEngine()
    image_id = engine.add_image("reg:5000/x:1", {})
    cache = Cache(tmp_path / "cache")
    copier = Skopeo(engine, cache=cache)
    first = copier.prepare(image_id, "zstd")
    [blob] = list((tmp_path / "cache" / "zstd").glob("*.blob"))
    blob.write_bytes(b"damaged")  # a cache file altered on disk: compressed again, the same digest
    assert copier.prepare(image_id, "zstd").digest == first.digest
    assert blob.read_bytes() != b"damaged"
    # an engine whose saved layer does not hash to its config's diff ID: one error naming both, nothing cached
    real_save = engine.save

    def tampered(image):
        import io
        import tarfile

        data = b"".join(real_save(image))
        out = io.BytesIO()
        with tarfile.open(fileobj=io.BytesIO(data)) as src, tarfile.open(fileobj=out, mode="w") as dst:
            for m in src.getmembers():
                body = src.extractfile(m).read()  # type: ignore[union-attr]
                if m.name == "config.json":
                    doc = _json.loads(body)
                    doc["rootfs"]["diff_ids"] = ["sha256:" + "0" * 64]
                    body = _json.dumps(doc).encode()
                m.size = len(body)
                dst.addfile(m, io.BytesIO(body))
        yield out.getvalue()

    engine.save = tampered  # type: ignore[method-assign]
    with pytest.raises(CopyError, match="not its diff ID sha256:0000"):
        copier.prepare(image_id, "gzip")
    assert not list((tmp_path / "cache" / "gzip").glob("*.blob"))
    copier.close()


def test_a_missing_skopeo_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_PUSH_TMP", str(tmp_path))
    engine = FakeEngine()
    image_id = engine.add_image("reg:5000/x:1", {})
    copier = Skopeo(engine, binary=str(tmp_path / "no-skopeo"), cache=LayerCache(tmp_path / "cache"))
    prepared = copier.prepare(image_id, "zstd")
    with pytest.raises(CopyError, match="apt-get install skopeo"):
        copier.send(prepared, "reg:5000/x", RegistryAuth("reg:5000"), plain_http=True)
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
