"""Build a Plan through the docker SDK's low-level build API, in dependency order.

- Each parent is built once; children get build arg `BASE_IMAGE=<parent image ID>` (never a moving tag); the base
  flavor gets the bootstrap image ID (or the pulled registry base's ID).
- Independent images build in parallel (`jobs`).
- An image is "up to date" when an image carrying `io.imagebuild.inputs-hash == plan.inputs_hash` (and built on the
  same base image ID, label `io.imagebuild.base-id`) exists: its tag is (re)pointed at it, nothing is built.
- Every `error`/`errorDetail` chunk fails that image; the failing step, the last lines and the log path are kept.
- Interrupts (SIGINT/SIGTERM): the build connections are shut (the engine cancels the build), the build's
  intermediate containers are removed, `KeyboardInterrupt` propagates (exit 130). A rerun continues from the cache.

This module is the entry point (`build_plan`) and keeps the names other code imports from it; the work lives in:

    options.py    BuildOptions                      order.py      dependency order, --only selection
    state.py      RunState: one run's shared state  schedule.py   thread pool, not-built propagation, --keep-going
    one_image.py  build one image (low-level API)   bases.py      bootstrap / pull the OS image once per source
    uptodate.py   labels, up-to-date look-up        describe.py   size, largest layers, alias tags
    buildargs.py  proxies, CREATED, REVISION        disk.py       free space vs the plan's estimate
    interrupt.py  SIGINT/SIGTERM, container cleanup
"""

from __future__ import annotations

from imagebuild.builder import interrupt as _interrupt
from imagebuild.builder import one_image as _one_image
from imagebuild.builder import schedule as _schedule
from imagebuild.builder.bases import base_image_id as _base_image_id
from imagebuild.builder.buildargs import PROXY_VARS, proxy_build_args, register_secret_url
from imagebuild.builder.disk import (
    BOOTSTRAP_ESTIMATE,
    DISK_MARGIN,
    GB,
    PIP_STAGE_FACTOR,
    SIZE_ESTIMATE,
    DiskSpaceError,
    check_disk,
    estimate_bytes,
)
from imagebuild.builder.options import BuildFailed, BuildOptions, default_jobs
from imagebuild.builder.order import order_images, select_images
from imagebuild.builder.progress import Progress
from imagebuild.builder.schedule import DONE, FAILED
from imagebuild.builder.state import RunState
from imagebuild.builder.uptodate import BASE_LABEL, INPUTS_LABEL
from imagebuild.builder.uptodate import find_up_to_date as _find_up_to_date
from imagebuild.models import ImagePlan, ImageResult, Plan

__all__ = [
    "BASE_LABEL", "BOOTSTRAP_ESTIMATE", "DISK_MARGIN", "DONE", "FAILED", "GB", "INPUTS_LABEL", "PIP_STAGE_FACTOR",
    "PROXY_VARS", "SIZE_ESTIMATE", "BuildFailed", "BuildOptions", "DiskSpaceError", "build_plan", "check_disk",
    "default_jobs", "estimate_bytes", "order_images", "proxy_build_args", "register_secret_url", "select_images",
]


class _Run(RunState):
    """One run: its state plus the operations on it (kept as methods for callers and tests that drive a run)."""

    def execute(self) -> list[ImageResult]:
        return _schedule.execute(self)

    def build_one(self, img: ImagePlan) -> ImageResult:
        return _one_image.build_one(self, img)

    def base_image_id(self, img: ImagePlan) -> str:
        return _base_image_id(self, img)

    def find_up_to_date(self, img: ImagePlan, base_id: str) -> str | None:
        return _find_up_to_date(self.client, img, base_id)

    def interrupt(self) -> None:
        _interrupt.interrupt(self)

    def remove_containers(self) -> list[str]:
        return _interrupt.remove_containers(self)


def build_plan(client, plan: Plan, options: BuildOptions | None = None,
               progress: Progress | None = None) -> list[ImageResult]:
    """Build (or find up to date) every selected image of `plan`; one ImageResult per planned image.

    Raises KeyboardInterrupt after cleaning up when interrupted (SIGINT or SIGTERM).
    """
    options = options or BuildOptions()
    progress = progress or Progress()
    run = _Run(client, plan, options, progress)
    return _interrupt.run_interruptibly(run, run.execute)
