"""An image written to a registry BY DIGEST with skopeo (Debian's 1.9): compressed layers, no tag moved.

Why skopeo: the engine's own push writes gzip only (and Docker 20.10 cannot write zstd at all); skopeo (containers/
image) compresses with klauspost's zstd, writes OCI media types, asks the registry for each blob before sending it
(an unchanged layer is never re-sent) and can write a manifest to `name@sha256:…` without any tag, which is the
seam a signer needs: sign the digest, then move the tags.

Two steps, each one skopeo copy:
1. `prepare`: the engine's `docker save` of the image (through the store, so both engines work) into a private
   temporary folder, then `skopeo copy docker-archive:… dir:FOLDER` with the chosen compression (`dir:`, not `oci:`:
   skopeo's OCI layout reader finds no Docker schema 2 manifest by name, which gzip writes). Not skopeo's
   `docker-daemon:` transport: skopeo 1.9 talks to the engine with API 1.22, which dockerd 26.1 refuses ("client
   version 1.22 is too old. Minimum supported API version is 1.24"), and that transport buffers the same save
   stream into a temporary file anyway. zstd level 3 output is deterministic (same layer bytes, same digest; measured
   on both engines), so an unchanged layer keeps its digest and is not sent again.
   zstd writes an OCI manifest; containers/image then re-encodes the config as an OCI config (another digest).
   The engine's own config bytes are put back (a Docker config is a valid OCI config: BuildKit pushes the same), so
   the pushed config digest stays the image's ID on the classic store, which the catalog, the record and the
   registry cache match images by. gzip writes a Docker schema 2 manifest, whose config skopeo keeps as it is.
2. `send`: `skopeo copy --preserve-digests dir:FOLDER docker://NAME@DIGEST`: blobs the registry lacks, then the
   manifest by digest. Credentials go in an auth file (mode 0600 in a 0700 folder, removed with it), never on a
   command line; skopeo's own retries are off (the caller retries with the one policy).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from imagebuild.engine.store import ImageStore
from imagebuild.oci import RegistryAuth
from imagebuild.oci.skopeo import (
    SKOPEO,
    CopyError,
    FormatRefused,
    auth_file_doc,
    refused_format,
    skopeo_message,
    skopeo_version,
    write_auth_file,
)

__all__ = ["COMPRESSIONS", "CopyError", "FormatRefused", "Prepared", "Skopeo", "auth_file_doc", "compress_args",
           "refused_format", "skopeo_message", "skopeo_version"]

COMPRESSIONS = ("zstd", "gzip")
DEFAULT_COMPRESSION = "zstd"
ZSTD_LEVEL = 3  # CoreWeave's ml-containers' level: most of the size gain, compresses ~8x faster than gzip -6
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"


@dataclass(frozen=True)
class Prepared:
    """An image compressed into a skopeo `dir:` folder, ready to be sent by digest."""

    layout: Path
    digest: str  # the manifest's digest: what the registry will serve
    manifest: bytes  # its exact bytes (tags are PUT with these)
    media_type: str
    config: tuple[str, int]  # digest, size
    layers: tuple[tuple[str, int, str], ...]  # digest, size, media type
    compression: str

    @property
    def blobs(self) -> list[tuple[str, int]]:
        return [self.config, *((d, n) for d, n, _ in self.layers)]


def compress_args(compression: str) -> list[str]:
    """skopeo's destination flags for `compression` (zstd: OCI media types; gzip: Docker schema 2, what every
    runtime pulls)."""
    if compression == "zstd":
        return ["--format", "oci", "--dest-compress", "--dest-compress-format", "zstd", "--dest-compress-level",
                str(ZSTD_LEVEL)]
    if compression == "gzip":
        return ["--format", "v2s2", "--dest-compress", "--dest-compress-format", "gzip"]
    raise CopyError(f"compression {compression!r}: choose one of {', '.join(COMPRESSIONS)}")


class Skopeo:
    """prepare/send over one private temporary folder; `close()` removes it (layouts, archive, auth file)."""

    def __init__(self, store: ImageStore, *, binary: str = SKOPEO, log: Callable[[str], None] = lambda _m: None,
                 run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> None:
        self.store = store
        self.binary = binary
        self.log = log
        self._run = run
        self._work: Path | None = None
        self._count = 0

    @property
    def work(self) -> Path:
        if self._work is None:
            self._work = Path(tempfile.mkdtemp(prefix="imagebuild-push-", dir=os.environ.get("IMAGEBUILD_PUSH_TMP")))
            self._work.chmod(0o700)
        return self._work

    def close(self) -> None:
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None

    def _skopeo(self, args: list[str], what: str) -> None:
        try:
            out = self._run([self.binary, *args], capture_output=True, text=True, check=False)
        except OSError:
            skopeo_version(self.binary)  # names the package
            raise
        if out.returncode != 0:
            message = skopeo_message(out.stderr)
            raise CopyError(f"{what}: {message}")

    def prepare(self, image_id: str, compression: str) -> Prepared:
        """Compress `image_id` (as the engine holds it) into a new `dir:` folder."""
        flags = compress_args(compression)
        self._count += 1
        archive = self.work / f"image-{self._count}.tar"
        layout = self.work / f"layout-{self._count}"
        with archive.open("wb") as fh:
            for chunk in self.store.save(image_id):
                fh.write(chunk)
        self._skopeo(["copy", "--quiet", *flags, f"docker-archive:{archive}", f"dir:{layout}"],
                     f"{image_id[:19]}: compressing with {compression}")
        if compression == "zstd":
            _restore_config(layout, _archive_config(archive))
        archive.unlink()
        return _read_layout(layout, compression)

    def send(self, prepared: Prepared, name: str, auth: RegistryAuth, *, plain_http: bool,
             ca_file: str | None = None) -> None:
        """Blobs the registry lacks, then the manifest by digest (`name@digest`): no tag is written."""
        authfile = write_auth_file(self.work / "auth.json", auth)
        args = ["copy", "--quiet", "--preserve-digests", "--retry-times", "0", "--dest-authfile", str(authfile)]
        if plain_http:
            args.append("--dest-tls-verify=false")
        elif ca_file:
            certs = self.work / "certs"
            certs.mkdir(exist_ok=True)
            shutil.copyfile(ca_file, certs / "ca.crt")
            args += ["--dest-cert-dir", str(certs)]
        try:
            self._skopeo([*args, f"dir:{prepared.layout}", f"docker://{name}@{prepared.digest}"],
                         f"{name}@{prepared.digest}")
        finally:
            authfile.unlink(missing_ok=True)


def _archive_config(archive: Path) -> bytes:
    """The config bytes of a one-image docker-archive (manifest.json's `Config` member)."""
    with tarfile.open(archive) as tar:
        manifest = json.loads(_member(tar, "manifest.json"))
        return _member(tar, str(manifest[0]["Config"]))


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    fh = tar.extractfile(name)
    if fh is None:
        raise CopyError(f"docker-archive: {name} is not a file")
    return fh.read()


def _blob_path(layout: Path, digest: str) -> Path:
    return layout / digest.partition(":")[2]  # skopeo's dir: names blobs by their hex digest


def _write_blob(layout: Path, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    _blob_path(layout, digest).write_bytes(data)
    return digest


def _restore_config(layout: Path, config: bytes) -> None:
    """Point the layout's manifest at the engine's own config bytes (see the module's docstring: why)."""
    manifest = json.loads((layout / "manifest.json").read_bytes())
    old = manifest["config"]
    if json.loads(config).get("rootfs") != json.loads(_blob_path(layout, old["digest"]).read_bytes()).get("rootfs"):
        raise CopyError("skopeo changed the image's layers (rootfs diff_ids) while converting it")
    manifest["config"] = {"mediaType": OCI_CONFIG, "digest": _write_blob(layout, config), "size": len(config)}
    _blob_path(layout, old["digest"]).unlink()
    (layout / "manifest.json").write_bytes(json.dumps(manifest, separators=(",", ":")).encode())


def _read_layout(layout: Path, compression: str) -> Prepared:
    body = (layout / "manifest.json").read_bytes()
    manifest = json.loads(body)
    return Prepared(
        layout=layout, digest="sha256:" + hashlib.sha256(body).hexdigest(), manifest=body,
        media_type=str(manifest.get("mediaType") or OCI_MANIFEST),
        config=(str(manifest["config"]["digest"]), int(manifest["config"]["size"])),
        layers=tuple((str(x["digest"]), int(x["size"]), str(x.get("mediaType") or "")) for x in manifest["layers"]),
        compression=compression)
