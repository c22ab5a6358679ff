"""Which images a run handles and in what order: dependency order (parents first) and the --only selection.

Pure functions of the plan (no engine), so they fail fast with a UsageError before anything is built.
"""

from __future__ import annotations

from imagebuild.errors import UsageError
from imagebuild.models import ImagePlan, Plan
from imagebuild.plan.only import matches, select


def order_images(images: list[ImagePlan]) -> list[ImagePlan]:
    """Dependency order (parents first), stable with respect to the plan's order."""
    by_tag = {i.tag: i for i in images}
    if len(by_tag) != len(images):
        dup = sorted({i.tag for i in images if sum(j.tag == i.tag for j in images) > 1})
        raise UsageError(f"the plan lists these tags more than once: {', '.join(dup)}")
    out: list[ImagePlan] = []
    state: dict[str, int] = {}

    def visit(img: ImagePlan, chain: tuple[str, ...]) -> None:
        if state.get(img.tag) == 2:
            return
        if state.get(img.tag) == 1:
            raise UsageError(f"the plan has a parent cycle: {' -> '.join((*chain, img.tag))}")
        state[img.tag] = 1
        if img.parent is not None:
            if img.parent not in by_tag:
                raise UsageError(f"{img.tag}: its parent {img.parent} is not in the plan")
            visit(by_tag[img.parent], (*chain, img.tag))
        state[img.tag] = 2
        out.append(img)

    for img in images:
        visit(img, ())
    return out


def select_images(plan: Plan, only: tuple[str, ...] = ()) -> tuple[list[ImagePlan], set[str]]:
    """(images to handle in dependency order, tags selected explicitly). Parents of selected images come along."""
    ordered = order_images(plan.images)
    if not only:
        return ordered, {i.tag for i in ordered}
    chosen = {i.tag for i in ordered if matches(i, only)}
    if not chosen:
        raise UsageError(f"--only {' '.join(only)} matches no image of the plan; images: "
                         + ", ".join(i.id for i in ordered[:20]) + (" ..." if len(ordered) > 20 else ""))
    return select(Plan(plan.matrix_file, ordered), only), chosen
