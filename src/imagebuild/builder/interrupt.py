"""Interrupts (SIGINT/SIGTERM): stop the builds and leave no intermediate containers behind.

The low-level build API has no cancel call: shutting the streaming connection's socket makes the engine see EOF and
cancel the build, and unblocks the worker thread reading it. The intermediate containers the engine announced
("---> Running in <id>") are removed here too, so none is left behind whatever the engine's own cleanup manages.
SIGTERM is turned into KeyboardInterrupt so both signals take the same path (exit 130); a rerun continues from the
cache.
"""

from __future__ import annotations

import concurrent.futures as cf
import signal
import socket
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


def shutdown_response(response) -> None:
    """Shut a streaming response's socket from another thread (unblocks the reader; the engine sees EOF)."""
    if response is None:
        return
    sock = None
    # where urllib3 keeps the socket differs by version (and for unix sockets): try the known paths
    for path in (("raw", "_fp", "fp", "raw", "_sock"), ("raw", "_connection", "sock")):
        obj = response
        for attr in path:
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if isinstance(obj, socket.socket):
            sock = obj
            break
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
        response.close()
    except (OSError, AttributeError):
        pass


def interrupt(run: RunState) -> None:
    """Stop: shut the build connections (the engine cancels), stop bootstraps, remove intermediate containers."""
    run.cancel.set()
    bootstrap_mod.terminate_all()
    with run.lock:
        responses = list(run.responses.values())
    for resp in responses:
        shutdown_response(resp)
    remove_containers(run)


def remove_containers(run: RunState) -> list[str]:
    import docker

    with run.lock:
        cids = sorted(run.containers)
    removed = []
    for cid in cids:
        try:
            run.client.api.remove_container(cid, force=True)
            removed.append(cid)
        except docker.errors.NotFound:
            pass
        except Exception as exc:
            run.progress.note(f"could not remove build container {cid}: {exc}")
    return removed


def run_interruptibly(run: RunState, execute: Callable[[], list[ImageResult]]) -> list[ImageResult]:
    """execute() with SIGTERM handled like SIGINT; on either: interrupt the run, wait up to 60 s for the workers while removing
    containers (a build may announce one more before it notices), re-raise KeyboardInterrupt. The progress view is
    stopped in every case. Signal handlers can only be set from the main thread; elsewhere they are left alone."""
    progress = run.progress
    old_term = None
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        def on_term(signum, frame):
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
