"""`bake`: the run's plan (its record's inputs unless flags are given), narrowed by the run's --only selection (with
the parents the images need), written as a buildx bake file by builder.bake with the source dates, CREATED and
REVISION `build` would use (read from the engine, when one answers, as build reads them), and each target's output as
the BuildKit backend exports for the builder found here (builder.bake's OUTPUT_*)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from imagebuild.backends import AUTO, BUILDKIT, spec
from imagebuild.builder.bake import (
    OUTPUT_ARCHIVE,
    OUTPUT_ENGINE,
    OUTPUT_LOAD,
    planned_base_ids,
    planned_source_dates,
    root_refs,
    target_output,
    write_bake,
)
from imagebuild.builder.buildargs import created_arg, revision_arg
from imagebuild.builder.options import BuildOptions
from imagebuild.engine.store import ImageStore
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
    store = _engine_store(say)
    refs = root_refs(plan, store, os_images)  # the OS image of each chain, found once for its date and its ID
    source_dates, unread = planned_source_dates(plan, store, os_images, refs)
    if unread:
        say(f"bake: no image of {', '.join(unread)} in the engine to read its source date from: SOURCE_DATE_EPOCH "
            "defaults to the snapshot or export time, so `imagebuild build` will not find the baked images up to "
            "date (bootstrap or pull the OS image first, or set SOURCE_DATE_EPOCH)")
    defaults = BuildOptions()  # `build` without --created: CREATED is each image's source date
    return write_bake(plan, output, context_dir, os_images, secrets=spec(backend).features.build_secrets,
                      source_dates=source_dates, created=created_arg(defaults), revision=revision_arg(defaults),
                      outputs=bake_outputs(say), base_ids=planned_base_ids(plan, store, os_images, refs))


def bake_outputs(say: Say) -> str:
    """How a bake on buildx's current builder must export so its images are build's (builder/bake.py's module doc):
    asked as the BuildKit backend's preflight asks before `build`. Where no builder answers (no buildx, an engine
    too old, none at all: an export for another machine), OUTPUT_LOAD, what a remote builder does, and one line."""
    from imagebuild.builder.backends import bake_outputs as outputs_of

    try:
        found = outputs_of(BUILDKIT)
    except UsageError as exc:
        say(f"bake: no builder here to export for ({exc}); each target's output is {target_output('', OUTPUT_LOAD)} "
            "(a docker-container or remote builder's)")
        return OUTPUT_LOAD
    if found not in (OUTPUT_ARCHIVE, OUTPUT_ENGINE, OUTPUT_LOAD):
        raise AssertionError(f"bake output {found!r}")
    return found


def archives(doc: dict[str, Any]) -> list[str]:
    """The docker archives a bake of `doc` writes, to `docker load` after it (builder/bake.py)."""
    from imagebuild.builder.bake import archives as found

    return found(doc)


def _engine_store(say: Say) -> ImageStore | None:
    """The engine `build` would read dates from, when one answers; None (and a line saying so) otherwise: a bake
    export is also for machines with no engine of their own."""
    from imagebuild.engine.connect import connect
    from imagebuild.engine.store import as_store
    from imagebuild.errors import EngineUnavailable

    try:
        return as_store(connect("inspect", timeout=30))
    except EngineUnavailable as exc:
        say(f"bake: {exc}")
        return None


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
