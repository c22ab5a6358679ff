"""Reading a registry image without an engine (remote.read_registry) over a fake registry client that serves real
manifest / config / gzip layer bytes; and how the Opener picks engine or registry. The real registry is in
tests/integration/test_inventory_images.py."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile

import pytest
from _fake_engine import FakeEngine
from _fake_registry import FakeRegistry

from imagebuild.errors import EngineUnavailable, ImagebuildError
from imagebuild.inventory import ImageNotFound
from imagebuild.inventory.from_registry import read_registry
from imagebuild.inventory.open import Opener
from imagebuild.oci import Reference, RegistryError

SITE = "opt/venv/lib/python3.11/site-packages"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer(entries: dict[str, bytes]) -> tuple[bytes, bytes]:
    """(uncompressed tar, gzip blob)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    return raw, gzip.compress(raw, mtime=0)


def fake_registry(tamper: bool = False) -> FakeRegistry:
    """ml/pt:v1 is an index whose linux/amd64 entry is a two-layer image (layer 2 whites out a dist-info)."""
    l1_raw, l1 = layer({"var/lib/dpkg/status": b"Package: a\nStatus: install ok installed\nVersion: 1\n",
                        f"{SITE}/six-1.16.0.dist-info/METADATA": b"Name: six\nVersion: 1.16.0\n"})
    l2_raw, l2 = layer({f"{SITE}/.wh.six-1.16.0.dist-info": b"",
                        f"{SITE}/numpy-2.1.0.dist-info/METADATA": b"Name: numpy\nVersion: 2.1.0\n",
                        "usr/lib/os-release": b"ID=debian\nVERSION_ID=12\n"})
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "created": "2026-11-30T20:00:00Z",
        "config": {"Labels": {"io.imagebuild.torch": "2.13.0"}},
        "rootfs": {"type": "layers", "diff_ids": [sha(l1_raw), sha(l2_raw)]},
        "history": [{"created_by": "ADD rootfs"}, {"created_by": "ENV A=1", "empty_layer": True},
                    {"created_by": "RUN pip install numpy"}],
    }).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": sha(config),
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": sha(b),
                    "size": len(b)} for b in (l1, l2)],
    }).encode()
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": [{"digest": "sha256:" + "0" * 64, "platform": {"os": "linux",
                                                                                     "architecture": "arm64"}},
                                      {"digest": sha(manifest), "platform": {"os": "linux",
                                                                              "architecture": "amd64"}}]}).encode()
    reg = FakeRegistry()
    for blob in (config, l1, l2):
        reg.put_blob(blob)
    if tamper:
        reg.blobs[sha(l2)] = l1  # served bytes that do not match the digest asked for
    reg.put_manifest("ml/pt", "v1", index)
    reg.put_manifest("ml/pt", None, manifest)
    reg.config_digest = sha(config)  # what the tests compare the image ID with
    return reg


def test_index_layers_whiteouts_labels():
    reg = fake_registry()
    inv = read_registry(reg, Reference.parse("reg.example:5000/ml/pt:v1"), "linux/amd64")
    assert inv.image_id == reg.config_digest and inv.source == "registry" and inv.size_kind == "compressed"
    assert [(d.name, d.version) for d in inv.pythons] == [("numpy", "2.1.0")]  # six whited out by layer 2
    assert [p.name for p in inv.debs] == ["a"] and inv.os_release.id == "debian"
    assert inv.labels == {"io.imagebuild.torch": "2.13.0"}
    assert [layer.created_by for layer in inv.layers] == ["ADD rootfs", "RUN pip install numpy"]
    assert all(layer.size and layer.size > 0 for layer in inv.layers)
    assert inv.repo_digests[0].startswith("reg.example:5000/ml/pt@sha256:")


def test_platform_not_in_index_names_what_is():
    with pytest.raises(ImagebuildError, match=r"no linux/s390x image in its index; it has: linux/amd64, linux/arm64"):
        read_registry(fake_registry(), Reference.parse("reg.example:5000/ml/pt:v1"), "linux/s390x")


def test_layer_digest_mismatch_fails():
    with pytest.raises(RegistryError, match="downloaded layer has digest"):
        read_registry(fake_registry(tamper=True), Reference.parse("reg.example:5000/ml/pt:v1"), "linux/amd64")


def test_opener_local_name_unknown_is_image_not_found():
    opener = Opener(lambda: FakeEngine())  # an engine without any image
    with pytest.raises(ImageNotFound, match=r"no image 'nosuch:tag' in the local engine"):
        opener.open("nosuch:tag")


def test_opener_engine_down_local_name_says_so():
    def down():
        raise EngineUnavailable("no Docker engine answers at the default socket")

    with pytest.raises(EngineUnavailable):
        Opener(down).open("nosuch:tag")


def test_opener_not_an_image_reference_for_registry():
    with pytest.raises(ImagebuildError, match="is not an image reference"):
        Opener(lambda: FakeEngine()).open("docker://reg.example/a:bad!tag")
