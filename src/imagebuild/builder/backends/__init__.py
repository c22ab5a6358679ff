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
from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast

from imagebuild.backends import AUTO_ORDER, spec
from imagebuild.builder.backend import BuildBackend
from imagebuild.engine.store import ImageStore
from imagebuild.errors import UsageError

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


def make_backend(name: str, store: ImageStore, settings: Mapping[str, Any] | None = None) -> BuildBackend:
    """The backend `name` building into `store`, after its preflight."""
    return preflight(name, settings)(store)
