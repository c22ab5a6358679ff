"""The classic-builder backend: the docker SDK's low-level build API (`client.api.build`), one HTTP request per image.

The engine answers HTTP 200 and streams JSON chunks; a failed build is an `error`/`errorDetail` chunk in that stream,
so `BuildStream` (stream.py) reads every chunk and any error chunk fails the image, whatever the HTTP status said.
The request itself is fixed here: host network (no bridge networks), intermediate containers removed even on failure
(`rm`, `forcerm`), never pull (the base is an image ID already in the engine).

Cancel: the low-level API has no cancel call. Shutting the streaming connection's socket makes the engine see EOF and
cancel the build, and unblocks the thread reading it. The intermediate containers the engine announced
("---> Running in <id>") are remembered, so `cleanup()` removes them whatever the engine's own cleanup manages.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from imagebuild.builder.backend import BuildEvent, BuildOutcome, BuildRequest
from imagebuild.builder.stream import BuildStream

if TYPE_CHECKING:
    import docker


def shutdown_response(response: object) -> None:
    """Shut a streaming response's socket from another thread (unblocks the reader; the engine sees EOF)."""
    if response is None:
        return
    sock = None
    # where urllib3 keeps the socket differs by version (and for unix sockets): try the known paths
    for path in (("raw", "_fp", "fp", "raw", "_sock"), ("raw", "_connection", "sock")):
        obj: object = response
        for attr in path:
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if isinstance(obj, socket.socket):
            sock = obj
            break
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
        close = getattr(response, "close", None)
        if close is not None:
            close()
    except (OSError, AttributeError):
        pass


def _response_of(gen: object) -> object:
    """The streaming response behind the SDK's build generator (the SDK does not hand it out; its frame holds it)."""
    frame = getattr(gen, "gi_frame", None)
    if frame is None:
        return None
    response: object = frame.f_locals.get("response")
    return response


class ClassicBackend:
    """Builds through `client.api.build`; keeps the intermediate containers its builds announced for `cleanup()`."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.containers: set[str] = set()

    def start(self, request: BuildRequest) -> ClassicBuild:
        return ClassicBuild(self, request)

    def track(self, container_id: str) -> None:
        with self.lock:
            self.containers.add(container_id)

    def cleanup(self, warn: Callable[[str], None]) -> list[str]:
        import docker

        with self.lock:
            cids = sorted(self.containers)
        removed = []
        for cid in cids:
            try:
                self.client.api.remove_container(cid, force=True)
                removed.append(cid)
            except docker.errors.NotFound:
                pass
            except Exception as exc:
                warn(f"could not remove build container {cid}: {exc}")
        return removed


class ClassicBuild:
    """One `client.api.build` call: its stream, its response (for cancel), its outcome."""

    def __init__(self, backend: ClassicBackend, request: BuildRequest) -> None:
        self.backend, self.request = backend, request
        self.stream = BuildStream(log=request.log)
        self._lock = threading.Lock()
        self._response: object = None
        self._cancelled = False
        self._error_sent = False

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            response = self._response
        shutdown_response(response)

    def _hold(self, response: object) -> None:
        """Keep the response for cancel(); shut it at once if cancel() came while the request was being sent."""
        with self._lock:
            self._response = response
            cancelled = self._cancelled
        if cancelled:
            shutdown_response(response)

    def events(self) -> Iterator[BuildEvent]:
        import docker

        req = self.request
        try:
            if self._cancelled:
                raise InterruptedError("cancelled before the build started")
            gen = self.backend.client.api.build(
                fileobj=req.context, custom_context=True, decode=True, rm=True, forcerm=True, pull=False,
                network_mode="host", buildargs=dict(req.build_args), labels=dict(req.labels), tag=req.tag,
                timeout=req.timeout, dockerfile=req.dockerfile,
            )
            self._hold(_response_of(gen))
            for chunk in gen:
                for ev in self.stream.feed(chunk):
                    if ev.kind == "container":
                        self.backend.track(ev.text)
                    elif ev.kind == "error":
                        self._error_sent = True
                    yield ev
        except docker.errors.APIError as exc:
            self.stream.fail(exc.explanation or str(exc))
        except Exception as exc:  # connection shut by cancel(), engine gone
            if self._cancelled:
                self.stream.fail("interrupted")
            else:
                self.stream.fail(f"lost the build stream: {type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._response = None
        self.stream.finish()  # a stream that ended without an image ID failed too
        if self.stream.error is not None and not self._error_sent:
            self._error_sent = True
            yield BuildEvent("error", self.stream.error)

    def outcome(self) -> BuildOutcome:
        stream = self.stream
        if stream.failed:
            return BuildOutcome(image_id=None, error=stream.failure_summary(), tail=stream.tail_text())
        image_id = stream.image_id or ""
        if not image_id.startswith("sha256:"):  # the stream may report a short ID ("Successfully built 0123abcd")
            inspect: Callable[[str], Mapping[str, object]] = self.backend.client.api.inspect_image
            image_id = str(inspect(image_id)["Id"])
        return BuildOutcome(image_id=image_id)
