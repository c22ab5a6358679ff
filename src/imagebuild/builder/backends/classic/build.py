"""The classic-builder backend: the engine's build API through the image store (`ImageStore.build`), one request per
image.

The engine answers HTTP 200 and streams JSON chunks; a failed build is an `error`/`errorDetail` chunk in that stream,
so `BuildStream` (stream.py) reads every chunk and any error chunk fails the image, whatever the HTTP status said.
The request itself is fixed in engine/store.py: the request's network (host; no bridge networks), intermediate
containers removed even on failure, never pull (the base is an image ID already in the engine).

Cancel: the engine build is cancelled by shutting its streaming connection (engine/build.py). The intermediate
containers the engine announced ("---> Running in <id>") are remembered, so `cleanup()` removes them whatever the
engine's own cleanup manages.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator

from imagebuild.builder.backend import BuildEvent, BuildOutcome, BuildRequest
from imagebuild.builder.backends.classic.stream import BuildStream
from imagebuild.builder.context import tar_context
from imagebuild.engine.build import BuildCall
from imagebuild.engine.store import ImageStore
from imagebuild.engine.stream import EngineError


class ClassicBackend:
    """Builds through the store's classic build call; keeps the intermediate containers its builds announced for
    `cleanup()`."""

    def __init__(self, store: ImageStore) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.containers: set[str] = set()

    def start(self, request: BuildRequest) -> ClassicBuild:
        return ClassicBuild(self, request)

    def track(self, container_id: str) -> None:
        with self.lock:
            self.containers.add(container_id)

    def cleanup(self, warn: Callable[[str], None]) -> list[str]:
        with self.lock:
            cids = sorted(self.containers)
        removed = []
        for cid in cids:
            try:
                if self.store.remove_container(cid):
                    removed.append(cid)
            except Exception as exc:
                warn(f"could not remove build container {cid}: {exc}")
        return removed


class ClassicBuild:
    """One build call: its stream, its engine call (for cancel), its outcome."""

    def __init__(self, backend: ClassicBackend, request: BuildRequest) -> None:
        self.backend, self.request = backend, request
        self.stream = BuildStream(log=request.log)
        self._lock = threading.Lock()
        self._call: BuildCall | None = None
        self._cancelled = False
        self._error_sent = False

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            call = self._call
        if call is not None:
            call.cancel()

    def events(self) -> Iterator[BuildEvent]:
        for ev in self._run():
            if ev.kind == "container":
                self.backend.track(ev.text)
            elif ev.kind == "error":
                self._error_sent = True
            yield ev
        self.stream.finish()  # a stream that ended without an image ID failed too
        if self.stream.error is not None and not self._error_sent:
            self._error_sent = True
            yield BuildEvent("error", self.stream.error)
        if self.request.secret_build_args:
            yield from self._scrub()

    def _scrub(self) -> Iterator[BuildEvent]:
        """The classic builder records every build argument a step used in that step's image history, and keeps
        the builder stages' images as its cache: remove each step image whose history carries a credential (the
        index URLs' userinfo), leaf first, so no image in the engine keeps one. Those steps have no build cache
        next time (the BuildKit backend mounts credentials as build secrets instead). A failed build is scrubbed
        too; the final image is never removed (its history is checked by the tests: it carries none)."""
        secrets = [v for v in self.request.secret_build_args.values() if v]
        final = self.outcome().image_id if not self.stream.failed else None
        store = self.backend.store
        removed = 0
        for short in reversed(dict.fromkeys(self.stream.step_images)):
            image_id = store.image_id(short)
            if image_id is None or image_id == final:
                continue
            try:
                carried = any(v in json.dumps(store.history(image_id)) for v in secrets)
                if carried:
                    store.remove(image_id)
                    removed += 1
            except EngineError:  # a child still needs it (the final image's own chain): not a builder stage
                continue
        if removed:
            yield BuildEvent("line", f"removed {removed} intermediate image(s) whose history carried index "
                                     "credentials (no build cache for those steps)")

    def _run(self) -> Iterator[BuildEvent]:
        """The build's events until its stream ends; failures are recorded in `self.stream`, never raised."""
        req = self.request
        if self._cancelled:
            self.stream.fail("interrupted")
            return
        try:
            context = tar_context(req.dockerfile, dict(req.context_files), dict(req.context_dirs))
        except (OSError, ValueError) as exc:  # a context folder that is gone, a path that escapes the context
            self.stream.fail(f"{type(exc).__name__}: {exc}")
            return
        self.stream.begin()
        try:
            call = self.backend.store.build(context, tag=req.tag, dockerfile="Dockerfile",
                                            build_args=req.all_build_args(), labels=dict(req.labels),
                                            timeout=req.timeout, network=req.network)
            with self._lock:
                self._call = call
                cancelled = self._cancelled
            if cancelled:
                call.cancel()
            for chunk in call.chunks():
                yield from self.stream.feed(chunk)
        except EngineError as exc:
            self.stream.fail(str(exc))
        except Exception as exc:  # connection shut by cancel(), engine gone
            self.stream.fail("interrupted" if self._cancelled else f"lost the build stream: {type(exc).__name__}: {exc}")
        finally:
            context.close()

    def outcome(self) -> BuildOutcome:
        stream = self.stream
        if stream.failed:
            return BuildOutcome(image_id=None, error=stream.failure_summary(), tail=stream.tail_text(),
                                phases=tuple(stream.timed_phases()))
        image_id = stream.image_id or ""
        if not image_id.startswith("sha256:"):  # the stream may report a short ID ("Successfully built 0123abcd")
            image_id = self.backend.store.image_id(image_id) or image_id
        return BuildOutcome(image_id=image_id, phases=tuple(stream.timed_phases()))
