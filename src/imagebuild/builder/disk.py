"""Refuse a run up front when the engine's disk cannot hold what it would build.

A CUDA runtime image fills tens of GB; running out halfway leaves a broken engine state and a confusing error, so the
estimate (per flavor and CPU/CUDA, doubled for the pip builder stage, plus bootstraps and a margin) is compared with
the data-root's free space before the first build. Only checked when the data-root is on this machine.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from imagebuild.builder import bootstrap as bootstrap_mod
from imagebuild.builder.uptodate import holds_inputs, labels_of
from imagebuild.engine.store import ImageStore
from imagebuild.errors import ImagebuildError
from imagebuild.models import ImagePlan
from imagebuild.units import format_size

if TYPE_CHECKING:
    from imagebuild.builder.state import RunState

GB = 1000**3
# final-image growth per flavor, bytes (what the flavor adds on top of its parent)
SIZE_ESTIMATE = {
    ("base", "cpu"): int(0.4 * GB),
    ("base", "cuda"): int(0.4 * GB),
    ("runtime", "cpu"): int(1.5 * GB),
    ("runtime", "cuda"): int(7.0 * GB),
    ("dev", "cpu"): int(1.0 * GB),
    ("dev", "cuda"): int(3.0 * GB),
}
BOOTSTRAP_ESTIMATE = int(0.5 * GB)  # the tar on disk + the imported layer
PIP_STAGE_FACTOR = 2  # runtime/dev install into a builder stage first: the stage layer + the copy
DISK_MARGIN = 2 * GB


class DiskSpaceError(ImagebuildError):
    pass


def _kind(img: ImagePlan) -> str:
    return "cpu" if img.variant.versions.cuda == "cpu" else "cuda"


def estimate_bytes(images: list[ImagePlan]) -> int:
    total = 0
    for img in images:
        est = SIZE_ESTIMATE.get((img.flavor, _kind(img)), SIZE_ESTIMATE[("runtime", _kind(img))])
        total += est * (PIP_STAGE_FACTOR if img.flavor != "base" else 1)
    return total


def check_disk(store: ImageStore, to_build: list[ImagePlan], bootstraps: int, free_bytes: int | None = None,
               root: str | None = None) -> str | None:
    """Refuse (DiskSpaceError) when the engine's free space cannot hold the plan; returns a note when unchecked."""
    if not to_build and not bootstraps:
        return None
    if free_bytes is None:
        root = root or store.root_dir()
        if root is None:
            return "disk check skipped: the engine's data-root is not on this machine"
        free_bytes = shutil.disk_usage(root).free
    need = estimate_bytes(to_build) + bootstraps * BOOTSTRAP_ESTIMATE + DISK_MARGIN
    if free_bytes < need:
        counts: dict[str, int] = {}
        for img in to_build:
            k = f"{_kind(img).upper() if _kind(img) == 'cpu' else 'CUDA'} {img.flavor}"
            counts[k] = counts.get(k, 0) + 1
        what = ", ".join(f"{n} {k}" for k, n in counts.items())
        free, needed, margin = (format_size(n, digits=1) for n in (free_bytes, need, DISK_MARGIN))
        raise DiskSpaceError(
            f"not enough disk space for this build: the engine's data-root {root or ''} has {free} "
            f"free, building {what} needs about {needed} (estimate incl. builder stages and "
            f"{margin} margin); free space (docker image prune / docker builder prune) or build fewer "
            "images with --only"
        )
    return None


def preflight_disk_check(run: RunState) -> None:
    """The run's check: count missing bootstraps and images whose tag does not already carry their inputs hash.

    A cheap approximation of "what will be built" (the exact up-to-date test also needs the base ID, known only
    once parents are built); --force counts every image.
    """
    if not run.options.check_disk:
        return
    to_build, bootstraps = [], set()
    for img in run.images:
        if img.parent is None and img.variant.base.kind == "bootstrap":
            spec = bootstrap_mod.spec_for(img.variant)
            if run.store.inspect(spec.tag) is None:
                bootstraps.add(spec.hash())
        if not run.options.force:
            info = run.store.inspect(img.tag)
            if info is not None and holds_inputs(labels_of(info), img):
                continue
        to_build.append(img)
    note = check_disk(run.store, to_build, len(bootstraps))
    if note:
        run.progress.note(note, style="dim")
