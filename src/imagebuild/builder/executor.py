"""Build a Plan in dependency order, each image through the build backend (default: the classic builder).

- Each parent is built once; children get build arg `BASE_IMAGE=<parent image ID>` (never a moving tag); the base
  flavor gets the bootstrap image ID (or the pulled registry base's ID).
- Independent images build in parallel (`jobs`).
- An image is "up to date" when an image carrying `io.imagebuild.inputs-hash == plan.inputs_hash` (and built on the
  same base image ID, label `io.imagebuild.base-id`) exists: its tag is (re)pointed at it, nothing is built.
- Every `error`/`errorDetail` chunk fails that image; the failing step, the last lines and the log path are kept.
- Interrupts (SIGINT/SIGTERM): the running builds are cancelled (classic builder: the connection is shut and the
  engine cancels the build), the builds' intermediate containers are removed, `KeyboardInterrupt` propagates (exit 130). A rerun continues from the cache.

This module is the entry point (`build_plan`); import every other name from the module that defines it:

    options.py    BuildOptions                      order.py      dependency order, --only selection
    state.py      RunState: one run's shared state  schedule.py   thread pool, not-built propagation, --keep-going
    one_image.py  build one image via the backend   bases.py      bootstrap / pull the OS image once per source
    uptodate.py   labels, up-to-date look-up        describe.py   size, largest layers, alias tags
    buildargs.py  proxies, CREATED, REVISION        disk.py       free space vs the plan's estimate
    interrupt.py  SIGINT/SIGTERM, cancel, cleanup   backend.py    the seam: BuildBackend / RunningBuild protocols
    classic.py    the classic-builder backend (low-level `client.api.build`); stream.py parses its JSON stream
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imagebuild.builder import interrupt as _interrupt
from imagebuild.builder import one_image as _one_image
from imagebuild.builder import schedule as _schedule
from imagebuild.builder.bases import base_image_id as _base_image_id
from imagebuild.builder.options import BuildOptions
from imagebuild.builder.progress import Progress
from imagebuild.builder.state import RunState
from imagebuild.builder.uptodate import find_up_to_date as _find_up_to_date
from imagebuild.models import ImagePlan, ImageResult, Plan

if TYPE_CHECKING:
    from imagebuild.builder.backend import BuildBackend


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
               progress: Progress | None = None, backend: BuildBackend | None = None) -> list[ImageResult]:
    """Build (or find up to date) every selected image of `plan`; one ImageResult per planned image.

    `backend` builds each image (default: the classic builder on `client`); `client` still serves the image store
    look-ups (up to date, bases, size, aliases). Raises KeyboardInterrupt after cleaning up when interrupted
    (SIGINT or SIGTERM).
    """
    options = options or BuildOptions()
    progress = progress or Progress()
    run = _Run(client, plan, options, progress, backend)
    return _interrupt.run_interruptibly(run, run.execute)
