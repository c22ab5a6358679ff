"""An image's files and config as the engine holds them, for `imagebuild export`: the root filesystem of a container
that is created and never started (what enroot's `import dockerd://` reads), the image's inspect data, and the
`docker save` stream. Nothing here runs anything of the image.

A container is needed because the engine exports filesystems of containers, not images; it gets a command that never
runs (images without CMD/ENTRYPOINT cannot be created otherwise), no network, and is removed even when the reader
stops half-way (Ctrl-C, a full disk).
"""

from __future__ import annotations

import secrets
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import docker

CHUNK = 1 << 20
PURPOSE_LABEL = "io.imagebuild.purpose"


class EngineReadError(Exception):
    """The engine failed while streaming (the text of its first line)."""


_DEFERRED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C/SIGTERM/SIGHUP wait until the block is done (cleanup that must finish: a container removal, a
    scratch tree); they are delivered, and raise, right after it. Main thread only; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def inspect_image(client: docker.DockerClient, reference: str) -> dict[str, Any] | None:
    """The engine's inspect data for a tag / ID / name@digest; None when it has no such image."""
    import docker as sdk

    try:
        data: dict[str, Any] = client.api.inspect_image(reference)
    except sdk.errors.ImageNotFound:
        return None
    except sdk.errors.APIError as exc:
        if exc.status_code in (400, 404):  # 400: not a valid reference at all
            return None
        raise
    return data


def _reason(exc: BaseException) -> str:
    text = str(getattr(exc, "explanation", None) or exc) or type(exc).__name__
    return text.splitlines()[0][:300]


@contextmanager
def container_filesystem(client: docker.DockerClient, image_id: str) -> Iterator[Iterator[bytes]]:
    """The image's root filesystem as the engine's tar stream (chunks of CHUNK bytes) of a created, never started
    container; the container is removed on the way out. Engine failures while streaming raise EngineReadError."""
    import docker as sdk
    import requests

    try:
        created = client.api.create_container(
            image_id, command=["/imagebuild-export-never-runs"], network_disabled=True,
            name=f"imagebuild-export-{secrets.token_hex(4)}", labels={PURPOSE_LABEL: "export"},
        )
    except (sdk.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EngineReadError(f"creating a container of {image_id[:19]} failed: {_reason(exc)}") from None
    cid = str(created["Id"])

    def chunks() -> Iterator[bytes]:
        try:
            yield from client.api.export(cid, chunk_size=CHUNK)
        except (sdk.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise EngineReadError(f"exporting the files of {image_id[:19]} failed: {_reason(exc)}") from None

    try:
        yield chunks()
    finally:
        with signals_deferred():
            try:
                client.api.remove_container(cid, force=True, v=True)
            except Exception:  # noqa: BLE001 - already gone; a failed cleanup must not hide the real error
                pass


def saved_image(client: docker.DockerClient, reference: str) -> Iterator[bytes]:
    """`docker save REFERENCE` as a stream: a docker-archive tar (what `apptainer build x.sif docker-archive:F`
    reads). A tag keeps its name in the archive's manifest; an ID gives an archive without RepoTags."""
    import docker as sdk
    import requests

    try:
        yield from client.api.get_image(reference, chunk_size=CHUNK)
    except (sdk.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EngineReadError(f"saving {reference} failed: {_reason(exc)}") from None
