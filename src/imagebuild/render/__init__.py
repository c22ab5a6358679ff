"""render: ResolvedVariant x flavor -> Dockerfile text, build args, build-context files and labels.

    render_image(variant, flavor, inputs) -> RenderedImage
    templates_dir() -> Path
    lint.lint_dockerfile(text) -> list[Finding]     (hadolint)

Build contract (what the builder passes besides `RenderedImage.build_args` / `secret_build_args`):
  BASE_IMAGE  the OS image (base) or the parent image ID (runtime, dev); CREATED, REVISION  volatile OCI labels;
  HTTP(S)_PROXY/NO_PROXY (any case) as build args when set: Docker's predefined args, never declared in a template.
The build context is `context_files` (path -> bytes) plus `context_dirs` (path -> host folder, e.g. wheelhouse/).
"""

from imagebuild.render.backend import plan_backend
from imagebuild.render.image import (
    CA_DIR,
    FILES_DIR,
    VOLATILE_BUILD_ARGS,
    WHEELHOUSE_DIR,
    RenderedImage,
    render_image,
    templates_dir,
)

__all__ = [
    "CA_DIR",
    "FILES_DIR",
    "VOLATILE_BUILD_ARGS",
    "WHEELHOUSE_DIR",
    "plan_backend",
    "RenderedImage",
    "render_image",
    "templates_dir",
]
