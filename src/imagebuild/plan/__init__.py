"""Plan: resolved variants x flavors -> ImagePlan rows (tags, parents, rendered Dockerfiles, inputs hashes).

`make_plan` asks the plan cache (plan/cache.py) first and loads the assembly (plan/assemble.py: matrix, resolve,
render, lock) only when it must plan: a run whose inputs did not change imports none of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.inputs import BuildInputs
from imagebuild.models import Plan
from imagebuild.plan import cache
from imagebuild.plan.paths import default_render_dir

if TYPE_CHECKING:
    from imagebuild.plan.assemble import plan_from_variants


def make_plan(
    matrix_path: str | Path,
    inputs: BuildInputs | None = None,
    registry: str | None = None,
    render_dir: Path | None = None,
    use_lock: bool = True,
) -> Plan:
    """Load, validate, resolve and render a matrix file. Raises MatrixError (exit 2) with every problem found.

    The matrix's lock (`images/cpu.yaml` -> `images/cpu.lock`) is used when it exists, unless `use_lock` is False
    (`imagebuild lock` plans without it: it is what gets rewritten). When none of the plan's inputs changed since
    the last plan of this matrix, that plan comes back from the cache without loading, resolving or rendering."""
    inputs = inputs or BuildInputs()
    render_dir = render_dir if render_dir is not None else default_render_dir(matrix_path)
    cached = cache.load(matrix_path, inputs, registry, render_dir, use_lock)
    if cached is not None:
        return cached
    from imagebuild.plan.assemble import assemble_plan

    plan = assemble_plan(matrix_path, inputs, registry, render_dir, use_lock)
    cache.save(plan, matrix_path, inputs, registry, render_dir, use_lock)
    return plan


def __getattr__(name: str) -> object:
    if name == "plan_from_variants":  # the assembly, loaded when asked for
        from imagebuild.plan.assemble import plan_from_variants

        return plan_from_variants
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["make_plan", "plan_from_variants"]
