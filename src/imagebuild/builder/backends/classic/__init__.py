"""The classic builder (the engine's `POST /build` through the SDK): build.py drives one build, stream.py reads the
engine's JSON stream. Its preflight is the engine itself: the run connects before anything builds."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from imagebuild.builder.backends.classic.build import ClassicBackend
from imagebuild.engine.store import ImageStore


def answers() -> tuple[bool, str]:
    """For auto: the classic builder builds on any engine that answers (the run connects before anything builds)."""
    return True, "the classic builder builds on any engine"


def preflight(settings: Mapping[str, Any]) -> Callable[[ImageStore], ClassicBackend]:
    return ClassicBackend
