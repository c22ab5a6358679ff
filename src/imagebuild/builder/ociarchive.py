"""A one-layer image made by us, byte for byte, and loaded through the engine: the bootstrap base's way in.

`docker import` writes the image config itself, with `created` = now, so the same root filesystem gave a new image
ID on every engine and every run. Here the config is ours: `created` and the history entry carry the rootfs's
SOURCE_DATE_EPOCH, the one layer's diff_id is the sha256 of the uncompressed tar, keys are sorted and nothing else
is in it, so the image ID (sha256 of the config) is a function of the tar and the labels only. The engine gets a
docker-archive (manifest.json + config + layer tar, the format `docker save` writes and `docker load` reads) through
the image store's `load` (engine/store.py), which reads every chunk of the engine's HTTP-200 answer: an error chunk
fails the load with the engine's own text.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import subprocess
import tarfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.dates import rfc3339
from imagebuild.engine.store import ImageStore, as_store
from imagebuild.engine.stream import EngineError
from imagebuild.errors import ImagebuildError

if TYPE_CHECKING:
    from imagebuild.engine.store import EngineClient

# Debian architecture names -> OCI (GOARCH) names, and the machine names Python reports
_DEB_TO_OCI = {"amd64": "amd64", "arm64": "arm64", "armhf": "arm", "armel": "arm", "i386": "386",
               "ppc64el": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}
_MACHINE_TO_OCI = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x",
                   "riscv64": "riscv64", "i686": "386"}
ARCHIVE_MTIME = 0  # the docker-archive's own members: their dates never reach the image


class LoadError(ImagebuildError):
    pass


def host_architecture() -> str:
    """The OCI architecture of the rootfs mmdebstrap makes here (the host's dpkg architecture)."""
    try:
        out = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip() in _DEB_TO_OCI:
            return _DEB_TO_OCI[out.stdout.strip()]
    except (OSError, subprocess.SubprocessError):
        pass
    return _MACHINE_TO_OCI.get(platform.machine(), platform.machine())


def file_digest(path: Path, chunk: int = 1 << 20) -> str:
    """sha256:<hex> of a file (a layer's diff_id when the file is the uncompressed layer tar)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return "sha256:" + h.hexdigest()


def image_config(*, diff_id: str, epoch: int, architecture: str, labels: Mapping[str, str],
                 env: Iterable[str], cmd: Iterable[str], created_by: str, comment: str = "") -> bytes:
    """The image config JSON, canonical (sorted keys, no spaces): same arguments, same bytes, same image ID."""
    when = rfc3339(epoch)
    history: dict[str, object] = {"created": when, "created_by": created_by}
    if comment:
        history["comment"] = comment
    doc = {
        "architecture": architecture,
        "config": {"Cmd": list(cmd), "Env": list(env), "Labels": dict(sorted(labels.items()))},
        "created": when,
        "history": [history],
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def config_id(config: bytes) -> str:
    """The image ID the engine gives a loaded image: the sha256 of its config bytes."""
    return "sha256:" + hashlib.sha256(config).hexdigest()


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), ARCHIVE_MTIME, 0o644
    tar.addfile(info, io.BytesIO(data))


def write_docker_archive(out: Path, layer_tar: Path, config: bytes, repo_tag: str) -> None:
    """A docker-archive holding one layer (copied from `layer_tar` as is: its digest is the diff_id) and `config`,
    tagged `repo_tag` when loaded."""
    cid = config_id(config)[7:]
    manifest = [{"Config": f"{cid}.json", "RepoTags": [repo_tag], "Layers": [f"{cid}/layer.tar"]}]
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        _member(tar, f"{cid}.json", config)
        info = tarfile.TarInfo(f"{cid}/layer.tar")
        info.size, info.mtime, info.mode = layer_tar.stat().st_size, ARCHIVE_MTIME, 0o644
        with open(layer_tar, "rb") as fh:
            tar.addfile(info, fh)
        _member(tar, "manifest.json", json.dumps(manifest, separators=(",", ":")).encode())


def load_archive(engine: ImageStore | EngineClient, archive: Path, what: str) -> list[str]:
    """Load a docker-archive into the store; the engine's "Loaded image..." lines. Any error chunk in the HTTP-200
    stream (a bad layer, a full disk) raises LoadError naming `what`."""
    try:
        return as_store(engine).load(archive)
    except EngineError as exc:
        raise LoadError(f"loading {what} into the engine failed: {exc}") from None
