"""Build stage: base images (bootstrap / pull), build stream parsing, executor, progress. The engine connection
lives in `imagebuild.engine`.

Public entry points:
    build_plan(client, plan, options, progress) -> list[ImageResult]   (executor.py)
    BuildOptions                                          (options.py)
    make_progress(plain=..., verbose=...)                 (progress.py)
"""

from imagebuild.builder.executor import build_plan
from imagebuild.builder.options import BuildOptions
from imagebuild.builder.progress import make_progress

__all__ = ["BuildOptions", "build_plan", "make_progress"]
