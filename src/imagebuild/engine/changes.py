"""Whether this process may have changed the engine's images since an answer about them was read.

Every change the package makes to the engine goes through engine/: the image store's writes (store.py: tag, remove,
pull, load, build, containers) and the docker CLI's calls (cli.py: `image tag`, `image load`, `buildx build`, ...).
Each one says so here while it runs: `changing()` around a call, `started(process)` for a process that runs on
(a BuildKit build tags or loads its image when it ends). `stamp()` is what an answer read now is valid for: the
number of changes so far, or None while one is under way. The store keeps an inspect answer only under the stamp it
was read with (store.py: `_Answers`), so a run that changes nothing (the whole-process no-op) asks the engine about
each image once, and any change of its own makes every later question go to the engine again.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_count = 0  # changes started so far
_running = 0  # `changing()` calls under way
_processes: list[subprocess.Popen[bytes]] = []  # `started` processes not seen ended yet


@contextmanager
def changing() -> Iterator[None]:
    """Around a call that may change the engine's images: no answer is kept while it runs, none read before it
    is used after it."""
    global _count, _running
    with _lock:
        _count += 1
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            _count += 1


def started(process: subprocess.Popen[bytes]) -> None:
    """A process that may change the engine's images until it ends (a `docker buildx build`)."""
    global _count
    with _lock:
        _count += 1
        _processes.append(process)


def stamp() -> int | None:
    """The changes so far, or None while one is under way (an answer read now is not kept)."""
    global _count
    with _lock:
        ended = [p for p in _processes if p.poll() is not None]  # poll(): never blocks, None while its owner waits
        if ended:
            _processes[:] = [p for p in _processes if p not in ended]
            _count += 1
        return None if _running or _processes else _count
