"""Which backend builds a plan: `--backend` (BuildInputs.backend), else the matrix's `backend`, else classic.

The backend is a rendering input, not only a build option: on the BuildKit backend the templates use what only BuildKit
has (a pip download cache mount that never reaches a layer, index URLs as build secrets), so a plan rendered for one
backend is built by that backend. Every command that plans (build, test, push, render, bake) reads the same answer.
"""

from __future__ import annotations

from imagebuild.errors import UsageError
from imagebuild.inputs import BuildInputs
from imagebuild.models import Plan, ResolvedVariant

BACKENDS = ("classic", "buildkit")


def backend_of(variant: ResolvedVariant, inputs: BuildInputs) -> str:
    return inputs.backend or variant.backend


def plan_backend(plan: Plan, inputs: BuildInputs) -> str:
    """The one backend of a run; a matrix whose rows name different backends needs `--backend`."""
    chosen = sorted({backend_of(img.variant, inputs) for img in plan.images}) or ["classic"]
    if len(chosen) > 1:
        raise UsageError(f"the matrix's rows name different backends ({', '.join(chosen)}); one run builds with "
                         "one: choose it with --backend")
    return chosen[0]
