"""push/asheld.py: a containerd store's saved image (an OCI layout) pushed as the engine holds it when its manifest
already is the requested compression (the pushed digest is the manifest's, byte for byte); every other form falls
back to compressing (None); a saved blob or manifest of other bytes than its digest is refused (LayerError)."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from _oci_saves import digest_of, saved_layout

from imagebuild.push.asheld import as_held
from imagebuild.push.compress import DOCKER_MANIFEST, OCI_LAYER, LayerError


def test_the_engines_manifest_and_blobs_go_unchanged(tmp_path):
    archive, digest, manifest = saved_layout(tmp_path)
    prepared = as_held(archive, tmp_path / "layout", "zstd", digest)
    assert prepared is not None and prepared.as_held and prepared.reused == 0
    assert prepared.digest == digest and prepared.manifest == manifest == (tmp_path / "layout/manifest.json").read_bytes()
    for blob_digest, size in prepared.blobs:
        data = (tmp_path / "layout" / blob_digest.removeprefix("sha256:")).read_bytes()
        assert digest_of(data) == blob_digest and len(data) == size
    assert all(media == OCI_LAYER["zstd"] for _, _, media in prepared.layers)


def test_a_config_digest_as_the_image_id_is_no_contradiction(tmp_path):
    """The classic store names images by config digest: only a manifest digest must equal the saved manifest."""
    archive, digest, manifest = saved_layout(tmp_path)
    config_digest = json.loads(manifest)["config"]["digest"]
    assert as_held(archive, tmp_path / "layout", "zstd", config_digest).digest == digest


@pytest.mark.parametrize("form", ["gzip asked of zstd layers", "gzip layers asked as zstd", "two manifests",
                                  "no index.json", "docker manifest for zstd"])
def test_other_forms_are_compressed_as_before(tmp_path, form):
    kwargs: dict = {}
    compression = "zstd"
    if form == "gzip asked of zstd layers":
        compression = "gzip"
    elif form == "gzip layers asked as zstd":
        kwargs["layer_type"] = "application/vnd.oci.image.layer.v1.tar+gzip"
    elif form == "two manifests":
        kwargs["entries"] = 2
    elif form == "no index.json":
        kwargs["with_index"] = False
    else:
        kwargs["manifest_type"] = DOCKER_MANIFEST
    archive, digest, _ = saved_layout(tmp_path, **kwargs)
    assert as_held(archive, tmp_path / "layout", compression, digest) is None
    assert not (tmp_path / "layout").exists()


def test_a_blob_of_other_bytes_is_refused(tmp_path):
    archive, digest, _ = saved_layout(tmp_path, tamper="layer")
    with pytest.raises(LayerError, match="holds other bytes"):
        as_held(archive, tmp_path / "layout", "zstd", digest)
    assert not list((tmp_path / "layout").glob("*.partial"))


def test_a_manifest_of_other_bytes_than_its_digest_is_refused(tmp_path):
    archive, digest, _ = saved_layout(tmp_path, tamper="manifest")
    with pytest.raises(LayerError, match="index.json names: .* holds other bytes"):
        as_held(archive, tmp_path / "layout", "zstd", digest)


def test_another_images_manifest_is_refused(tmp_path):
    """The engine, asked for image X (a manifest digest), saved another manifest: refused, naming both."""
    archive, digest, _ = saved_layout(tmp_path, names=("a", "b"))
    (tmp_path / "other").mkdir()
    _, other_digest, other_manifest = saved_layout(tmp_path / "other", names=("c", "d"))
    with tarfile.open(archive) as src, tarfile.open(tmp_path / "asked.tar", "w") as out:
        for member in src.getmembers():
            out.addfile(member, src.extractfile(member))
        info = tarfile.TarInfo(f"blobs/sha256/{other_digest.removeprefix('sha256:')}")
        info.size = len(other_manifest)
        out.addfile(info, io.BytesIO(other_manifest))
    with pytest.raises(LayerError, match=f"saved manifest {digest} for image {other_digest}"):
        as_held(tmp_path / "asked.tar", tmp_path / "layout", "zstd", other_digest)
