"""The build backends as plug-ins: one folder each (classic/, buildkit/), named by one row of THE table
(imagebuild/backends.py: its name, features, options and this module path).

A plug-in is a package whose `__init__` has `preflight(settings) -> (store -> BuildBackend)`: it checks, before anything
builds (before the run connects to the engine), that it can build here (one `error:` line when it cannot) and returns
how to make the builder/backend.py seam's BuildBackend on the run's image store. `settings` holds the run options its
row names (RunOption.setting -> value). Nothing outside this module
imports a plug-in, so a third backend is its folder plus its table row.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, cast

from imagebuild.backends import AUTO_ORDER, spec
from imagebuild.builder.backend import BuildBackend, BuildEvent, BuildOutcome, BuildRequest, RunningBuild
from imagebuild.engine.store import ImageStore
from imagebuild.errors import ImagebuildError, UsageError

BackendFactory = Callable[[ImageStore], BuildBackend]


class Plugin(Protocol):
    """What a backend's package provides (its `__init__` module)."""

    def preflight(self, settings: Mapping[str, Any]) -> BackendFactory:
        """Checked to work here (else one UsageError line): how to make the backend on the run's image store."""
        ...

    def answers(self) -> tuple[bool, str]:
        """For `auto`: whether it builds here with no options of its own, and one phrase saying why (or why not)."""
        ...


def plugin(name: str) -> Plugin:
    """The plug-in of the concrete backend `name` (UsageError naming the choices for an unknown one)."""
    return cast(Plugin, importlib.import_module(spec(name).module))


def choose_auto() -> tuple[str, str]:
    """`auto`: the first row of AUTO_ORDER that answers here, and the one line that says which and why."""
    why_not: list[str] = []
    for name in AUTO_ORDER:
        ok, why = plugin(name).answers()
        if ok:
            return name, f"backend auto: {'; '.join(why_not) or why}; building with {spec(name).title}"
        why_not.append(why)
    raise UsageError(f"backend auto: no backend builds here ({'; '.join(why_not)})")


def preflight(name: str, settings: Mapping[str, Any] | None = None) -> BackendFactory:
    """The backend `name`'s preflight (`settings`: its own run options): how to make it on the run's store."""
    return plugin(name).preflight(dict(settings or {}))


def bake_outputs(name: str, settings: Mapping[str, Any] | None = None) -> str:
    """How a bake on backend `name`'s builder exports each target (builder/bake.py's OUTPUT_*: what that backend's
    builds do, so a bake gives their image IDs); UsageError when the backend has no bake or cannot build here."""
    found = getattr(plugin(name), "bake_outputs", None)
    if found is None:
        raise UsageError(f"the {spec(name).title} has no bake export")
    return str(found(dict(settings or {})))


def make_backend(name: str, store: ImageStore, settings: Mapping[str, Any] | None = None) -> BuildBackend:
    """The backend `name` building into `store`, after its preflight."""
    return preflight(name, settings)(store)


class DeferredBackend:
    """A backend whose preflight runs when its first build starts, for a run that expects to build nothing (every
    image found up to date before the executor starts): a no-op then asks the builder nothing (BuildKit's preflight is
    six docker CLI calls, ~1.2 s). Should the executor build after all, the preflight runs then, once; what it lacks
    here fails that build with the preflight's one line."""

    def __init__(self, make: Callable[[], BuildBackend]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._backend: BuildBackend | None = None
        self._refused: str | None = None

    @property
    def started(self) -> bool:
        """Whether the preflight ran (a build needed the backend)."""
        return self._backend is not None or self._refused is not None

    def start(self, request: BuildRequest) -> RunningBuild:
        with self._lock:
            if self._backend is None and self._refused is None:
                try:
                    self._backend = self._make()
                except ImagebuildError as exc:
                    self._refused = str(exc)
            backend, refused = self._backend, self._refused
        return backend.start(request) if backend is not None else _Refused(refused or "no backend")

    def cleanup(self, warn: Callable[[str], None]) -> list[str]:
        return self._backend.cleanup(warn) if self._backend is not None else []


class _Refused:
    """A build its backend's preflight refused: one error, no image."""

    def __init__(self, error: str) -> None:
        self.error = error

    def events(self) -> Iterator[BuildEvent]:
        yield BuildEvent("error", self.error)

    def cancel(self) -> None:
        pass

    def outcome(self) -> BuildOutcome:
        return BuildOutcome(image_id=None, error=self.error)
