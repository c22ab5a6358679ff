"""`--only`, selected once per run: what the patterns name (plan.only.matches, the one matcher) and, for a build,
the parents those images need. Every stage of the run takes the images from here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import UsageError
from imagebuild.models import ImagePlan, Plan
from imagebuild.plan.only import matches, matching, select


@dataclass(frozen=True)
class Selection:
    only: tuple[str, ...]
    named: list[ImagePlan]  # the images the patterns match (all without --only), plan order
    with_parents: list[ImagePlan]  # plus the parents they need (what a build handles), plan order


def select_images(plan: Plan, only: tuple[str, ...], matrix_path: Path | str) -> Selection:
    """The run's images; patterns that match nothing are an input error (exit 2)."""
    named = matching(plan, only)
    if only and not named:
        raise UsageError(f"--only {' '.join(only)}: matches no image of {matrix_path}")
    return Selection(only, named, select(plan, only) if only else list(plan.images))


def pick_one(plan: Plan, only: str | None, flavor: str | None, matrix: str, platform: str | None = None) -> ImagePlan:
    """The ONE plan row `export` and `slurm` act on (`--only` pattern and/or `--flavor`, `--platform`); none or
    several: a usage error naming the choices."""
    rows = [i for i in plan.images if (not flavor or i.flavor == flavor) and (not only or matches(i, only))
            and (not platform or i.variant.platform == platform)]
    if len(rows) == 1:
        return rows[0]
    what = " ".join(p for p in (f"--only {only!r}" if only else "", f"--flavor {flavor}" if flavor else "",
                                f"--platform {platform}" if platform else "") if p)
    if not rows:
        raise UsageError(f"{matrix}: {what or 'the plan'} matches no image; images: "
                         + ", ".join(f"{i.id} ({i.variant.platform})" for i in plan.images))
    narrow = "--only/--flavor/--platform" if len({i.variant.platform for i in rows}) > 1 else "--only/--flavor"
    raise UsageError(f"{matrix}: {what or 'the plan'} matches {len(rows)} images; narrow with {narrow}: "
                     + ", ".join(f"{i.id} ({i.variant.platform})" for i in rows))
