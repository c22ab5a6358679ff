"""BuildKit through `docker buildx build`: build.py drives one buildx process per image, argv.py its command line,
progress.py its rawjson progress, checks.py what the builder must answer before anything builds."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from imagebuild.builder.backends.buildkit import checks
from imagebuild.builder.backends.buildkit.build import BuildxBackend
from imagebuild.engine.store import ImageStore


def answers() -> tuple[bool, str]:
    """For auto: an engine >= 23 and buildx that runs (checks.answers)."""
    return checks.answers()


def preflight(settings: Mapping[str, Any]) -> Callable[[ImageStore], BuildxBackend]:
    """`settings`: builder (a buildx builder; None: buildx's current one), buildkit_cache (a registry repository).
    The backend drives the docker CLI, not the store."""
    backend = checks.preflight(settings.get("builder"), settings.get("buildkit_cache"))
    return lambda store: backend
