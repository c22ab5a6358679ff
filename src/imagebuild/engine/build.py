"""One classic-builder build call on the engine (`POST /build` through the SDK's low-level API), cancellable.

The low-level API has no cancel call. Shutting the streaming connection's socket makes the engine see EOF and cancel
the build, and unblocks the thread reading it; the SDK does not hand the response out, so it is taken from the
frame of the generator it returns. Chunks are given back as the engine sent them (decoded JSON): the classic
backend (builder/backends/classic/) turns them into build events, error chunks included.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any, Protocol

from imagebuild.engine.changes import changing
from imagebuild.engine.stream import EngineError


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


def response_of(gen: object) -> object:
    """The streaming response behind the SDK's build generator (the SDK does not hand it out; its frame holds it)."""
    frame = getattr(gen, "gi_frame", None)
    if frame is None:
        return None
    response: object = frame.f_locals.get("response")
    return response


class BuildCall(Protocol):
    """What the classic backend holds of a build call (EngineBuild here; the unit tests' fake engine has its own)."""

    def chunks(self) -> Iterator[object]: ...

    def cancel(self) -> None: ...


class EngineBuild:
    """A build request not sent yet: `chunks()` sends it and yields the decoded stream; `cancel()` from any thread.

    An engine refusal (HTTP 4xx/5xx before the stream) raises EngineError; a connection lost mid-stream raises what
    the transport raised."""

    def __init__(self, api: Any, **kwargs: Any) -> None:
        self._api, self._kwargs = api, kwargs
        self._lock = threading.Lock()
        self._response: object = None
        self.cancelled = False

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            response = self._response
        shutdown_response(response)

    def _hold(self, response: object) -> None:
        """Keep the response for cancel(); shut it at once if cancel() came while the request was being sent."""
        with self._lock:
            self._response = response
            cancelled = self.cancelled
        if cancelled:
            shutdown_response(response)

    def chunks(self) -> Iterator[object]:
        import docker

        if self.cancelled:
            raise InterruptedError("cancelled before the build started")
        with changing():  # the build tags its image when its stream ends (changes.py)
            try:
                gen = self._api.build(**self._kwargs)
            except docker.errors.APIError as exc:
                raise EngineError(str(exc.explanation or exc), exc.status_code) from None
            self._hold(response_of(gen))
            try:
                yield from gen
            except docker.errors.APIError as exc:
                raise EngineError(str(exc.explanation or exc), exc.status_code) from None
            finally:
                with self._lock:
                    self._response = None
