"""Interrupts (SIGINT/SIGTERM): stop the builds and leave no intermediate containers behind.

Every running build is cancelled through the backend seam (backend.py; for the classic builder, backends/classic/ shuts the
streaming connection and the engine cancels), bootstraps are stopped, and the backend's `cleanup()` removes what the
builds left behind (intermediate containers) while the workers wind down. SIGTERM is turned into KeyboardInterrupt
so both signals take the same path (exit 130); a rerun continues from the cache.
"""

from __future__ import annotations

import concurrent.futures as cf
import signal
import threading
import time
from typing import TYPE_CHECKING

from imagebuild.builder import bootstrap as bootstrap_mod
from imagebuild.models import ImageResult

if TYPE_CHECKING:
    from collections.abc import Callable

    from imagebuild.builder.state import RunState


class _Terminated(KeyboardInterrupt):
    pass


def interrupt(run: RunState) -> None:
    """Stop: cancel the running builds (the backend stops them), stop bootstraps, remove what they left behind."""
    run.cancel.set()
    bootstrap_mod.terminate_all()
    with run.lock:
        builds = list(run.builds.values())
    for build in builds:
        build.cancel()
    remove_containers(run)


def remove_containers(run: RunState) -> list[str]:
    """The backend's leftovers of cancelled builds (the classic builder's intermediate containers)."""
    return run.backend.cleanup(run.progress.note)


def run_interruptibly(run: RunState, execute: Callable[[], list[ImageResult]]) -> list[ImageResult]:
    """execute() with SIGTERM handled like SIGINT; on either: interrupt the run, wait up to 60 s for the workers while removing
    containers (a build may announce one more before it notices), re-raise KeyboardInterrupt. The progress view is
    stopped in every case. Signal handlers can only be set from the main thread; elsewhere they are left alone."""
    progress = run.progress
    old_term = None
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        def on_term(signum: int, frame: object) -> None:
            raise _Terminated()

        old_term = signal.signal(signal.SIGTERM, on_term)
    try:
        return execute()
    except KeyboardInterrupt:
        # a second Ctrl-C during cleanup should not leave containers behind either: ignore it for a moment
        if in_main:
            old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            progress.note("interrupted: stopping builds and removing their containers", style="red")
            interrupt(run)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not all(f.done() for f in list(run.running)):
                cf.wait(list(run.running), timeout=0.5)
                remove_containers(run)
            remove_containers(run)
        finally:
            if in_main:
                signal.signal(signal.SIGINT, old_int)
        raise
    finally:
        if in_main and old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        progress.stop()
