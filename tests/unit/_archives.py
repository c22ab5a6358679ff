"""docker-archives as `docker save` writes them, for tests: the classic layout (HEX.json config, DIR/layer.tar),
the OCI layout of Docker >= 25 (blobs/sha256/HEX, index.json) and the containerd store's (the image ID is the
manifest's digest)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def layer(text: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo("file")
        info.size = len(text)
        t.addfile(info, io.BytesIO(text))
    return buf.getvalue()


def config(layers: list[bytes], label: str = "x") -> bytes:
    return json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {"l": label}},
                       "rootfs": {"type": "layers", "diff_ids": [f"sha256:{_sha(x)}" for x in layers]}}).encode()


def tar_of(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out.getvalue()


def classic(label: str = "x") -> tuple[str, dict[str, bytes]]:
    """(image ID, members) of a legacy `docker save` of one image (no RepoTags: saved by ID)."""
    layers = [layer(label.encode())]
    cfg = config(layers, label)
    files = {f"{_sha(cfg)}.json": cfg, "abc/layer.tar": layers[0],
             "manifest.json": json.dumps([{"Config": f"{_sha(cfg)}.json", "RepoTags": None,
                                           "Layers": ["abc/layer.tar"]}]).encode()}
    return f"sha256:{_sha(cfg)}", files


def oci(label: str = "x", containerd: bool = False) -> tuple[str, dict[str, bytes]]:
    """(image ID, members) of a Docker >= 25 save: blobs by digest, index.json; with `containerd` the ID is the
    manifest's digest (the containerd image store's), else the config's."""
    layers = [layer(label.encode())]
    cfg = config(layers, label)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"digest": f"sha256:{_sha(cfg)}", "size": len(cfg)},
                           "layers": [{"digest": f"sha256:{_sha(x)}", "size": len(x)} for x in layers]}).encode()
    files = {f"blobs/sha256/{_sha(x)}": x for x in layers}
    files[f"blobs/sha256/{_sha(cfg)}"] = cfg
    files[f"blobs/sha256/{_sha(manifest)}"] = manifest
    files["index.json"] = json.dumps({"schemaVersion": 2, "manifests": [
        {"digest": f"sha256:{_sha(manifest)}", "size": len(manifest)}]}).encode()
    files["manifest.json"] = json.dumps([{"Config": f"blobs/sha256/{_sha(cfg)}", "RepoTags": None,
                                          "Layers": [f"blobs/sha256/{_sha(x)}" for x in layers]}]).encode()
    return (f"sha256:{_sha(manifest)}" if containerd else f"sha256:{_sha(cfg)}"), files
