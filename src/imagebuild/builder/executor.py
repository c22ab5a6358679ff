"""Build a Plan in dependency order, each image through the run's build backend (`BuildOptions.backend`, default the
classic builder; the table imagebuild/backends.py names them), every image look-up through the engine's image store (engine/store.py).

- Each parent is built once; children get build arg `BASE_IMAGE=<parent image ID>` (never a moving tag); the base
  flavor gets the bootstrap image ID (or the pulled registry base's ID).
- Independent images build in parallel (`jobs`).
- An image is "up to date" when an image carrying `io.imagebuild.inputs-hash == plan.inputs_hash` whose layers begin
  with its parent's layers exists (uptodate.py): its tag is (re)pointed at it, nothing is built.
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
    backends/     the plug-ins, one folder each     logs.py       the per-image log files
                  (classic/, buildkit/), loaded by the table's row (backends/__init__.py)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imagebuild.builder import interrupt as _interrupt
from imagebuild.builder import schedule as _schedule
from imagebuild.builder.options import BuildOptions
from imagebuild.builder.progress import Progress
from imagebuild.builder.state import RunState
from imagebuild.engine.store import ImageStore, as_store
from imagebuild.models import ImageResult, Plan

if TYPE_CHECKING:
    from imagebuild.builder.backend import BuildBackend
    from imagebuild.engine.store import EngineClient


def build_plan(engine: ImageStore | EngineClient, plan: Plan, options: BuildOptions | None = None,
               progress: Progress | None = None, backend: BuildBackend | None = None) -> list[ImageResult]:
    """Build (or find up to date) every selected image of `plan`; one ImageResult per planned image.

    `engine` is the image store (or a docker client, whose store is used): up to date, bases, size, aliases.
    `backend` builds each image (default: the one `options.backend` names, on that store). Raises
    KeyboardInterrupt after cleaning up when interrupted (SIGINT or SIGTERM).
    """
    options = options or BuildOptions()
    progress = progress or Progress()
    run = RunState(as_store(engine), plan, options, progress, backend)
    return _interrupt.run_interruptibly(run, lambda: _schedule.execute(run))
