"""Build stage: base images (bootstrap / pull), the dependency-ordered executor, progress, and the backend seam
(backend.py: build one image, stream events, cancel) with the backends behind it as plug-ins, one folder each
(backends/classic/, backends/buildkit/), named by THE table imagebuild/backends.py).
`bake.py` exports the plan for `docker buildx bake` instead. The engine connection and the image store live in `imagebuild.engine`.

Public entry points:
    build_plan(store, plan, options, progress, backend=None) -> list[ImageResult]    (executor.py)
    BuildOptions                                          (options.py)
    make_progress(plain=..., verbose=...)                 (progress.py)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from imagebuild.builder.executor import build_plan
    from imagebuild.builder.options import BuildOptions
    from imagebuild.builder.progress import make_progress

__all__ = ["BuildOptions", "build_plan", "make_progress"]

# imported when first asked for: a module of the stage (uptodate.py: is this image here?) is read by `push` and
# `test` too, and they load no executor, backend or bootstrap with it
_HOMES = {"build_plan": "executor", "BuildOptions": "options", "make_progress": "progress"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
