"""From what the user typed to an Inventory: a local tag / image ID first, a registry reference otherwise.

`docker://REF` always means the registry. A reference that names a registry (`host:port/repo:tag`,
`registry.example.com/repo@sha256:...`) and is not in the local engine is read from that registry, streamed
layer by layer (nothing is pulled into the engine). Anything else that the engine does not have is an error naming
the reference (exit 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from imagebuild.errors import EngineUnavailable, ImagebuildError
from imagebuild.inventory.from_registry import read_registry
from imagebuild.inventory.local import ImageNotFound, find_image, read_local
from imagebuild.inventory.model import ImageFiles, Inventory
from imagebuild.oci import Reference, ReferenceSyntaxError, RegistryClient, RegistryError, resolve_auth

if TYPE_CHECKING:
    from imagebuild.engine.store import EngineClient

REGISTRY_PREFIX = "docker://"


class Opener:
    """Reads references with one engine connection (made on first need) and one registry client per registry."""

    def __init__(self, connect: Callable[[], EngineClient], *, platform: str | None = None,
                 ca_file: str | None = None, log: Callable[[str], None] = lambda _m: None,
                 files_of: Callable[[EngineClient, str], ImageFiles] | None = None) -> None:
        """`files_of(engine, image ID)`: a local image's files as read before and kept (pipeline/keptfiles.py), else
        read now; None: every local image is read."""
        self._connect = connect
        self._files_of = files_of
        self._client: EngineClient | None = None
        self._engine_error: EngineUnavailable | None = None
        self._registries: dict[str, RegistryClient] = {}
        self._read: dict[str, Inventory] = {}
        self.platform = platform
        self.ca_file = ca_file
        self.log = log

    def engine(self) -> EngineClient | None:
        if self._client is None and self._engine_error is None:
            try:
                self._client = self._connect()
            except EngineUnavailable as exc:
                self._engine_error = exc
        return self._client

    def open(self, text: str) -> Inventory:
        """The inventory of `text` (read once per Opener: `diff X X` reads X once)."""
        if text not in self._read:
            self._read[text] = self._open(text)
        return self._read[text]

    def _open(self, text: str) -> Inventory:
        if text.startswith(REGISTRY_PREFIX):
            return self._remote(text[len(REGISTRY_PREFIX):], text)
        registry_ref = _registry_reference(text)
        client = self.engine()
        if client is not None:
            inspect: dict[str, Any] | None = find_image(client, text)
            if inspect is not None:
                files = self._files_of(client, str(inspect["Id"])) if self._files_of is not None else None
                return read_local(client, text, inspect, files)
            if registry_ref is None:
                raise ImageNotFound(f"no image {text!r} in the local engine (to read a registry image, give its "
                                    f"registry: HOST[:PORT]/REPO:TAG, or {REGISTRY_PREFIX}REF)")
        elif registry_ref is None:
            assert self._engine_error is not None
            raise self._engine_error
        return self._remote(text, text)

    def _remote(self, ref_text: str, shown: str) -> Inventory:
        try:
            ref = Reference.parse(ref_text)
        except ReferenceSyntaxError as exc:
            raise ImagebuildError(f"{shown!r} is not an image reference: {exc}") from None
        reg = self._registries.get(ref.registry)
        if reg is None:
            reg = RegistryClient(resolve_auth(ref.registry), ca_file=self.ca_file, log=self.log)
            self._registries[ref.registry] = reg
        self.log(f"reading {ref} from registry {ref.registry} (layers streamed and checked, nothing pulled into "
                 "the engine)")
        try:
            return read_registry(reg, ref, self.platform)
        except RegistryError as exc:
            if exc.status == 404:
                where = "the local engine or " if not shown.startswith(REGISTRY_PREFIX) else ""
                raise ImageNotFound(f"no image {shown!r} in {where}registry {ref.registry}") from None
            raise ImagebuildError(f"{shown}: {exc}") from None


def _registry_reference(text: str) -> Reference | None:
    """The reference when `text` names its registry explicitly (a domain with '.' or ':' or localhost)."""
    try:
        ref = Reference.parse(text)
    except ReferenceSyntaxError:
        return None
    return ref if ref.domain is not None else None
