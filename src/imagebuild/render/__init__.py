"""render: ResolvedVariant x flavor -> Dockerfile text, build args, build-context files and labels.

    render_image(variant, flavor, inputs) -> RenderedImage
    templates_dir() -> Path
    lint.lint_dockerfile(text) -> list[Finding]     (hadolint)

Build contract (what the builder passes besides `RenderedImage.build_args` / `secret_build_args`):
  BASE_IMAGE  the OS image (base) or the parent image ID (runtime, dev); CREATED, REVISION  volatile OCI labels;
  HTTP(S)_PROXY/NO_PROXY (any case) as build args when set: Docker's predefined args, never declared in a template.
The build context is `context_files` (path -> bytes) plus `context_dirs` (path -> host folder, e.g. wheelhouse/).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
    "RenderedImage",
    "render_image",
    "templates_dir",
]


def __getattr__(name: str) -> object:
    """The names above come from render/image.py, loaded (with jinja2) when first asked for: a module that needs
    only `render.data` or `render.te_key` (the builder's preflight, a cached plan) does not load the templates."""
    if name in __all__:
        from imagebuild.render import image

        return getattr(image, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
