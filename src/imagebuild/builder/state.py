"""The shared state of one build run.

The scheduler, the one-image builder, the base sources and the interrupt cleanup all read and write the same
results, cancel flag and in-flight builds; they are plain functions over this object (one module each) rather
than one large class. `lock` guards the dicts and sets that worker threads touch.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from pathlib import Path

from imagebuild.builder.backend import BuildBackend, RunningBuild
from imagebuild.builder.backends import make_backend
from imagebuild.builder.buildargs import created_arg, proxy_build_args, revision_arg
from imagebuild.builder.options import BuildOptions
from imagebuild.builder.order import select_images
from imagebuild.builder.progress import Progress
from imagebuild.engine.store import ImageStore
from imagebuild.models import ImagePlan, ImageResult, Plan
from imagebuild.secrets import register_url_credentials


class RunState:
    def __init__(self, store: ImageStore, plan: Plan, options: BuildOptions, progress: Progress,
                 backend: BuildBackend | None = None) -> None:
        self.store, self.plan, self.options, self.progress = store, plan, options, progress
        self.backend: BuildBackend = backend if backend is not None else make_backend(options.backend, store)
        self.images, self.selected = select_images(plan, options.only)
        self.results: dict[str, ImageResult] = {}
        self.tails: dict[str, str] = {}  # tag -> last lines of a failed build, for the failure report
        self.cancel = threading.Event()
        self.lock = threading.Lock()
        self.builds: dict[str, RunningBuild] = {}  # tag -> the backend's handle of a running build (for cancel)
        self.base_futures: dict[str, cf.Future[str]] = {}  # base source key -> its OS image ID (bootstrapped/pulled once)
        self.hash_locks: dict[str, threading.Lock] = {}  # inputs hash -> lock: identical entries build once
        self.te_rebuilt: set[str] = set()  # TE wheel keys this run built (--force rebuilds each key once)
        self.created = created_arg(options)
        self._revision: str | None = None  # revision_arg, asked (git) when the first image is built: see `revision`
        self._revision_lock = threading.Lock()
        self.proxies = proxy_build_args() if options.proxies is None else dict(options.proxies)
        for v in self.proxies.values():
            register_url_credentials(v)
        self.log_dir = Path(options.log_dir)
        self.running: dict[cf.Future[ImageResult], ImagePlan] = {}  # shared with the interrupt path, which waits on them
        self.pool: cf.ThreadPoolExecutor | None = None

    @property
    def revision(self) -> str:
        """The REVISION build arg of the run's builds (revision_arg: the option, else the checkout's HEAD), found
        once, when the first build asks: a run whose images are all up to date starts no `git`."""
        with self._revision_lock:  # not `lock`: `git` may take seconds, and a holder of `lock` may ask
            if self._revision is None:
                self._revision = revision_arg(self.options)
            return self._revision

    def result(self, img: ImagePlan) -> ImageResult:
        """The image's result row, created on first use."""
        with self.lock:
            if img.tag not in self.results:
                self.results[img.tag] = ImageResult.of(img)
            return self.results[img.tag]

    def warn(self, text: str) -> None:
        if self.options.on_warning:
            self.options.on_warning(text)
        self.progress.note(f"warning: {text}")
