"""`--only`, matched the same in every command (build, test, push, bake, run, export, slurm): the one matcher and
the selections made with it. Pure functions of a Plan, apart from plan/assemble.py, so a run that takes its plan
from the cache (the whole-process no-op) selects its images without loading the assembly (lock, resolve, render)."""

from __future__ import annotations

import fnmatch

from imagebuild.models import ImagePlan, Plan


def _patterns(patterns: str | tuple[str, ...]) -> list[str]:
    items = (patterns,) if isinstance(patterns, str) else patterns
    return [p.strip() for item in items for p in item.split(",") if p.strip()]


def matches(image: ImagePlan, patterns: str | tuple[str, ...]) -> bool:
    """`--only`, the same in every command: does any pattern match the image's id, tag, short tag, variant key or
    flavor? A pattern with glob characters (`*?[`) is an fnmatch glob; plain text matches as a substring. Commas
    separate alternatives inside one pattern (`--only base,dev`), and --only is repeatable."""
    names = (image.id, image.tag, image.short_tag, image.variant.key, image.flavor)
    for pat in _patterns(patterns):
        glob = any(c in pat for c in "*?[")
        if any(fnmatch.fnmatchcase(n, pat) if glob else pat in n for n in names):
            return True
    return False


def matching(plan: Plan, patterns: str | tuple[str, ...] | None) -> list[ImagePlan]:
    """The images --only selects (no parents), in plan order; all of them without patterns."""
    if not patterns or not _patterns(patterns):
        return list(plan.images)
    return [i for i in plan.images if matches(i, patterns)]


def select(plan: Plan, patterns: str | tuple[str, ...] | None) -> list[ImagePlan]:
    """Images matching any pattern (see `matches`), plus the parents they need, in plan order."""
    if not patterns or not _patterns(patterns):
        return list(plan.images)
    by_tag = plan.by_tag()
    chosen: set[str] = set()
    for image in plan.images:
        if matches(image, patterns):
            node: ImagePlan | None = image
            while node is not None and node.tag not in chosen:
                chosen.add(node.tag)
                node = by_tag.get(node.parent) if node.parent else None
    return [i for i in plan.images if i.tag in chosen]
