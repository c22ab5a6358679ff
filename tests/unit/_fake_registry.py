"""The one fake registry of the unit tests: what `imagebuild.oci.RegistryClient` answers (check_auth,
manifest_digest, manifest, manifest_raw, blob, open_blob, put_manifest) over dicts of manifests and blobs (no tests here; imported
as `from _fake_registry import FakeRegistry`). The HTTP behaviour of the real client is tested against a real HTTP
server in test_oci_registry.py.

Tags point at manifest digests (`tags[(repository, tag)]`); a pushed tag may have a digest only (what the fake
engine's push records), a stored one has its manifest body too (`put_manifest`).
"""

from __future__ import annotations

import hashlib
import io
import json
from typing import IO, Any

from imagebuild.oci import RegistryAuthError, RegistryError


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class FakeRegistry:
    def __init__(self, name: str = "reg.example:5000", *, bad_auth: bool = False) -> None:
        self.name = name
        self.tags: dict[tuple[str, str], str] = {}  # (repository, tag) -> manifest digest
        self.manifests: dict[str, bytes] = {}  # digest -> manifest body
        self.blobs: dict[str, bytes] = {}  # digest -> bytes served (may be tampered with)
        self.bad_auth = bad_auth
        self.auth_checks = 0
        self.serve_override: str | None = None  # manifest_digest answers this whatever was pushed
        self.fail_on: str | None = None  # manifest() of this reference fails with a 5xx
        self.calls: list[str] = []
        self.refuse_zstd = False  # a registry that predates zstd / OCI media types: the manifest PUT is refused
        self.send_errors: list[Exception] = []  # what the next copies into this registry raise (CopyError)
        self.sends: list[tuple[str, str, str | None, str | None]] = []  # (name, digest, user, password) per copy
        self.refuse_index = False  # a registry that takes image manifests but no OCI image index
        self.platforms: dict[str, str] = {}  # image ID -> the os/architecture its pushed config says (linux/amd64)

    # -- filling it ----------------------------------------------------------------------------------------------
    def put_blob(self, data: bytes) -> str:
        self.blobs[sha(data)] = data
        return sha(data)

    def put_manifest(self, repository: str, tag: str | None, body: bytes, media_type: str | None = None) -> str:
        """Store a manifest; `tag` None or a digest: by digest only (also RegistryClient.put_manifest's call)."""
        if self.refuse_index and media_type == "application/vnd.oci.image.index.v1+json":
            raise RegistryError(f"{self.name}: PUT manifest: HTTP 400: MANIFEST_INVALID: manifest invalid", status=400)
        digest = sha(body)
        self.manifests[digest] = body
        if media_type is not None:
            self.calls.append(f"put {tag}")
        if tag is not None and not tag.startswith("sha256:"):
            self.tags[(repository, tag)] = digest
        return digest

    def put_image(self, repository: str, tag: str, config: bytes, layers: list[tuple[str, int]]) -> str:
        """A schema2 manifest for `config` and layers (digest, size) under `tag`; the config digest."""
        cfg = self.put_blob(config)
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                    "config": {"digest": cfg, "size": len(config)},
                    "layers": [{"digest": d, "size": n} for d, n in layers]}
        self.put_manifest(repository, tag, json.dumps(manifest).encode())
        return cfg

    # -- RegistryClient ------------------------------------------------------------------------------------------
    def _refuse(self) -> None:
        if self.bad_auth:
            raise RegistryAuthError(f"{self.name}: unauthorized: authentication required (HTTP 401)")

    def check_auth(self, repository: str, actions: str = "pull,push") -> None:
        self.auth_checks += 1
        self.calls.append("auth")
        self._refuse()

    def manifest_digest(self, repository: str, reference: str) -> str | None:
        self._refuse()
        if self.serve_override:
            return self.serve_override
        if reference.startswith("sha256:"):
            return reference if reference in self.manifests else None
        return self.tags.get((repository, reference))

    def _digest_of(self, repository: str, reference: str) -> str | None:
        return reference if reference.startswith("sha256:") else self.tags.get((repository, reference))

    def manifest(self, repository: str, reference: str) -> tuple[str, dict[str, Any]] | None:
        self.calls.append(f"manifest {reference}")
        self._refuse()
        if self.fail_on == reference:
            raise RegistryError(f"{self.name}: GET manifest: HTTP 500: boom", status=500, transient=True)
        digest = self._digest_of(repository, reference)
        body = self.manifests.get(digest or "")
        if digest is None or body is None:
            return None
        try:
            doc = json.loads(body)
        except ValueError:  # as the real client: a body that is not JSON is a RegistryError
            raise RegistryError(f"{self.name}: manifest of {repository}:{reference} is not JSON") from None
        return digest, doc

    def manifest_raw(self, repository: str, reference: str) -> tuple[bytes, str, str]:
        digest = self._digest_of(repository, reference)
        body = self.manifests.get(digest or "")
        if digest is None or body is None:
            raise RegistryError("manifest unknown", status=404)
        try:  # what the server says it is: a manifest's media type, or (a proxy's login page) text/html
            media = str(json.loads(body).get("mediaType", ""))
        except (ValueError, AttributeError):
            media = "text/html"
        return body, media, digest

    def blob(self, repository: str, digest: str, max_bytes: int = 16 << 20) -> bytes:
        body = self.blobs[digest]
        if sha(body) != digest:
            raise RegistryError(f"{self.name}: blob {digest} of {repository} has digest {sha(body)}")
        return body

    def open_blob(self, repository: str, digest: str) -> IO[bytes]:
        return io.BytesIO(self.blobs[digest])

    def scheme(self) -> str:
        return "http"

    def blob_exists(self, repository: str, digest: str) -> bool:
        return digest in self.blobs

    # -- what a copy by digest (push/skopeo.py) writes into this registry ---------------------------------------------
    def copier(self) -> FakeCopier:
        return FakeCopier(self)


class FakeCopier:
    """push.Copier landing in a FakeRegistry: prepare makes a deterministic manifest of one config (the image's
    os/architecture: FakeRegistry.platforms) and one layer per image ID (the same image, the same digest, as skopeo's deterministic zstd); send stores blobs + manifest by
    digest, no tag, or raises the registry's next scripted error."""

    def __init__(self, registry: FakeRegistry) -> None:
        self.registry = registry
        self.closed = False
        self._bytes: dict[str, bytes] = {}
        self.prepared: list[str] = []  # image IDs saved and compressed, in order

    def prepare(self, image_id: str, compression: str) -> Any:
        from imagebuild.push.compress import OCI_CONFIG, OCI_MANIFEST
        from imagebuild.push.skopeo import Prepared

        self.prepared.append(image_id)
        os_name, arch = self.registry.platforms.get(image_id, "linux/amd64").split("/")[:2]
        config = json.dumps({"image": image_id, "os": os_name, "architecture": arch}).encode()
        layer = f"{image_id}-{compression}".encode() * 10
        zstd = compression == "zstd"
        layer_type = ("application/vnd.oci.image.layer.v1.tar+zstd" if zstd
                      else "application/vnd.docker.image.rootfs.diff.tar.gzip")
        media = OCI_MANIFEST if zstd else "application/vnd.docker.distribution.manifest.v2+json"
        manifest = {"schemaVersion": 2, "mediaType": media,
                    "config": {"mediaType": OCI_CONFIG, "digest": sha(config), "size": len(config)},
                    "layers": [{"mediaType": layer_type, "digest": sha(layer), "size": len(layer)}]}
        body = json.dumps(manifest).encode()
        self._bytes.update({sha(config): config, sha(layer): layer})
        return Prepared(layout=None, digest=sha(body), manifest=body, media_type=media,  # type: ignore[arg-type]
                        config=(sha(config), len(config)), layers=((sha(layer), len(layer), layer_type),),
                        compression=compression)

    def send(self, prepared: Any, name: str, auth: Any, *, plain_http: bool, ca_file: str | None = None) -> None:
        from imagebuild.push.skopeo import CopyError

        reg = self.registry
        reg.sends.append((name, prepared.digest, auth.username, auth.password))
        if reg.send_errors:
            raise reg.send_errors.pop(0)
        for digest, _ in prepared.blobs:
            reg.blobs[digest] = self._bytes[digest]
        if reg.refuse_zstd and prepared.compression == "zstd":
            raise CopyError(f"{name}@{prepared.digest}: writing manifest: uploading manifest {prepared.digest} to "
                            f"{name}: manifest invalid: manifest invalid")
        reg.manifests[prepared.digest] = prepared.manifest

    def close(self) -> None:
        self.closed = True
