"""The one fake registry of the unit tests: what `imagebuild.oci.RegistryClient` answers (check_auth,
manifest_digest, manifest, manifest_raw, blob, open_blob, put_manifest, delete_manifest) over dicts of manifests and blobs (no tests here; imported
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
        self.refuse_delete = False  # delete_manifest answers as a registry with deletes turned off (405)

    # -- filling it ----------------------------------------------------------------------------------------------
    def put_blob(self, data: bytes) -> str:
        self.blobs[sha(data)] = data
        return sha(data)

    def put_manifest(self, repository: str, tag: str | None, body: bytes, media_type: str | None = None) -> str:
        """Store `body` (under `tag`): also RegistryClient.put_manifest, push's rollback to the previous digest."""
        if media_type is not None:
            self.calls.append(f"put {tag}")
        digest = sha(body)
        self.manifests[digest] = body
        if tag is not None:
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
        return self.serve_override or self.tags.get((repository, reference))

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

    def delete_manifest(self, repository: str, digest: str) -> None:
        self.calls.append(f"delete {digest}")
        if self.refuse_delete:
            raise RegistryError(f"{self.name}: DELETE manifest: HTTP 405: The operation is unsupported.", status=405)
        self.manifests.pop(digest, None)
        for key in [k for k, v in self.tags.items() if k[0] == repository and v == digest]:
            del self.tags[key]

    def blob(self, repository: str, digest: str, max_bytes: int = 16 << 20) -> bytes:
        body = self.blobs[digest]
        if sha(body) != digest:
            raise RegistryError(f"{self.name}: blob {digest} of {repository} has digest {sha(body)}")
        return body

    def open_blob(self, repository: str, digest: str) -> IO[bytes]:
        return io.BytesIO(self.blobs[digest])
