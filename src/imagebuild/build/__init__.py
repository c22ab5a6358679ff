"""Build stage: engine connection, base images (bootstrap / pull), build stream parsing, executor, progress.

Public entry points:
    connect(timeout=...) -> docker.DockerClient          (engine.py)
    build_plan(client, plan, options, progress) -> list[ImageResult]   (executor.py)
    BuildOptions                                          (executor.py)
    make_progress(plain=..., verbose=...)                 (progress.py)
"""

from imagebuild.build.engine import connect, describe_host
from imagebuild.build.executor import BuildOptions, build_plan
from imagebuild.build.progress import make_progress

__all__ = ["BuildOptions", "build_plan", "connect", "describe_host", "make_progress"]
