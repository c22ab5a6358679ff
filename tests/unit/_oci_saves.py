"""A `docker save` of the containerd image store, made here byte for byte (index.json -> one manifest -> config + zstd
layers), for the push's as-held tests (test_push_asheld.py, test_engine_held.py)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import zstandard

from imagebuild.push.compress import OCI_LAYER, OCI_MANIFEST


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer_tar(name: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = f"content of {name}\n".encode()
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def saved_layout(tmp_path: Path, *, layer_type: str = OCI_LAYER["zstd"], manifest_type: str = OCI_MANIFEST,
                 entries: int = 1, tamper: str = "", with_index: bool = True,
                 names: tuple[str, ...] = ("a", "b")) -> tuple[Path, str, bytes]:
    """A `docker save` of the containerd store: index.json -> one manifest -> config + zstd layers."""
    plain = [_layer_tar(name) for name in names]
    layers = [zstandard.ZstdCompressor().compress(p) for p in plain]
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": [digest_of(p) for p in plain]}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": manifest_type,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest_of(config),
                                      "size": len(config)},
                           "layers": [{"mediaType": layer_type, "digest": digest_of(b), "size": len(b)} for b in layers]},
                          separators=(",", ":")).encode()
    digest = digest_of(manifest)
    blobs = {digest_of(b): b for b in (config, *layers)}
    blobs[digest] = manifest
    if tamper == "layer":
        blobs[digest_of(layers[1])] = layers[1][:-1] + b"\x00"
    elif tamper == "manifest":
        blobs[digest] = manifest.replace(b'"schemaVersion":2', b'"schemaVersion": 2')
    index = {"schemaVersion": 2, "manifests": [{"mediaType": manifest_type, "digest": digest,
                                                 "size": len(manifest)}] * entries}
    archive = tmp_path / "saved.tar"
    with tarfile.open(archive, "w") as tar:
        files = {f"blobs/sha256/{d.removeprefix('sha256:')}": b for d, b in blobs.items()}
        files["manifest.json"] = json.dumps([{"Config": f"blobs/sha256/{digest_of(config)[7:]}", "Layers": []}]).encode()
        if with_index:
            files["index.json"] = json.dumps(index).encode()
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive, digest, manifest


def keep_in_layout(archive: Path, root: Path, as_id: str | None = None) -> Path:
    """What a BuildKit build leaves in the held folder `root` (engine/held.py): the archive's blobs in the layout
    `root/oci` (as a `type=oci,tar=false` export writes them), then its manifest kept under `as_id` (default: the
    digest its index.json names). The kept index's path."""
    from imagebuild.engine import held

    blobs = held.layout_root(root) / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        for member in tar.getmembers():
            if member.name.startswith("blobs/sha256/"):
                (blobs / member.name.rsplit("/", 1)[1]).write_bytes(tar.extractfile(member).read())  # type: ignore[union-attr]
    image_id = as_id or index["manifests"][0]["digest"]
    if as_id is None:
        assert held.keep(image_id, root)
    else:  # an index naming `as_id` whatever the layout holds (a damaged or foreign kept image)
        (root / f"{image_id[7:]}.json").write_text(json.dumps(index))
    return root / f"{image_id[7:]}.json"
