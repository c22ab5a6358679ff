"""BuildKit through `docker buildx build`: build.py drives one buildx process per image, argv.py its command line,
progress.py its rawjson progress, checks.py what the builder must answer before anything builds."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from imagebuild.builder.backends.buildkit import checks
from imagebuild.engine.store import ImageStore

if TYPE_CHECKING:  # loaded by checks.preflight, when the backend is made (auto asks answers() only)
    from imagebuild.builder.backends.buildkit.build import BuildxBackend


def answers() -> tuple[bool, str]:
    """For auto: an engine >= 23 and buildx that runs (checks.answers)."""
    return checks.answers()


def preflight(settings: Mapping[str, Any]) -> Callable[[ImageStore], BuildxBackend]:
    """`settings`: builder (a buildx builder; None: buildx's current one), buildkit_cache (a registry repository).
    The backend drives the docker CLI, not the store."""
    backend = checks.preflight(settings.get("builder"), settings.get("buildkit_cache"))
    return lambda store: backend


def bake_outputs(settings: Mapping[str, Any]) -> str:
    """How a `docker buildx bake` on this builder must export to give the image IDs `build` gives (builder/bake.py's
    OUTPUT_* values): with build.py's export options (argv.py says why): an archive to load on the docker driver with
    the containerd image store (build.py exports into the kept layout instead: the same bytes), `type=docker` on any
    other driver, the driver's own exporter on the docker driver without the containerd store. The preflight's one
    line when the builder cannot build here."""
    backend = checks.preflight(settings.get("builder"), None)
    if backend.via_layout:
        return "archive"
    return "engine" if backend.docker_driver else "load"
