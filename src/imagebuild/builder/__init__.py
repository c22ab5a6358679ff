"""Build stage: base images (bootstrap / pull), the dependency-ordered executor, progress, and the backend seam
(backend.py: build one image, stream events, cancel) with the backends behind it as plug-ins, one folder each
(backends/classic/, backends/buildkit/), named by THE table imagebuild/backends.py).
`bake.py` exports the plan for `docker buildx bake` instead. The engine connection and the image store live in `imagebuild.engine`.

Public entry points:
    build_plan(store, plan, options, progress, backend=None) -> list[ImageResult]    (executor.py)
    BuildOptions                                          (options.py)
    make_progress(plain=..., verbose=...)                 (progress.py)
"""

from imagebuild.builder.executor import build_plan
from imagebuild.builder.options import BuildOptions
from imagebuild.builder.progress import make_progress

__all__ = ["BuildOptions", "build_plan", "make_progress"]
