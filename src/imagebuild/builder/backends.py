"""The build backends by name: what `BuildOptions.backend` (default "classic") chooses for a run.

A new backend (BuildKit, a remote builder) is its module implementing builder/backend.py's protocols plus one entry
here; nothing else in the executor changes.
"""

from __future__ import annotations

from collections.abc import Callable

from imagebuild.builder.backend import BuildBackend
from imagebuild.builder.classic import ClassicBackend
from imagebuild.engine.store import ImageStore
from imagebuild.errors import UsageError

BACKENDS: dict[str, Callable[[ImageStore], BuildBackend]] = {
    "classic": ClassicBackend,
}


def make_backend(name: str, store: ImageStore) -> BuildBackend:
    """The backend `name` building into `store`; UsageError naming the choices for an unknown name."""
    try:
        factory = BACKENDS[name]
    except KeyError:
        raise UsageError(f"unknown build backend {name!r}; choices: {', '.join(sorted(BACKENDS))}") from None
    return factory(store)
