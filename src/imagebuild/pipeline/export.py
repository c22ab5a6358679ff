"""`bake`: the run's plan (its record's inputs unless flags are given), narrowed by the run's --only selection (with
the parents the images need), written as a buildx bake file by builder.bake."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from imagebuild.backends import AUTO, BUILDKIT, spec
from imagebuild.builder.bake import write_bake
from imagebuild.errors import UsageError
from imagebuild.inputs import BuildInputs
from imagebuild.models import Plan
from imagebuild.pipeline.loaded import Say, load
from imagebuild.pipeline.selection import select_images
from imagebuild.pipeline.settings import RunOptions


def bake_file(options: RunOptions, output: str, context_dir: str | None, os_images: dict[str, str],
              say: Say) -> dict[str, Any]:
    inputs = options.inputs or BuildInputs()
    backend = BUILDKIT if inputs.backend in (None, AUTO) else inputs.backend  # bake builds with BuildKit
    inputs = replace(inputs, backend=backend)
    loaded = load(options.matrix, options.registry, inputs, options.state_dir, say)
    plan = loaded.plan
    _check_os_images(os_images, plan)  # the matrix's OSes: a key of an image --only leaves out is not a typo
    if options.only:
        plan = Plan(matrix_file=plan.matrix_file, images=select_images(plan, options.only, loaded.path).with_parents)
    return write_bake(plan, output, context_dir, os_images, secrets=spec(backend).features.build_secrets)


def _check_os_images(os_images: dict[str, str], plan: Plan) -> None:
    """An --os-image key that names no OS of the matrix would be ignored silently (a typo bakes the default base):
    one error naming the key, the closest OS and the choices."""
    import difflib

    choices = sorted({img.variant.os.id for img in plan.images})
    for key in os_images:
        if key not in choices:
            close = difflib.get_close_matches(key, choices, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(f"--os-image {key}={os_images[key]}: no image of the matrix is built on OS {key!r}{hint}; "
                             f"choices: {', '.join(choices) or 'none'}")
