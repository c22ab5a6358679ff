"""Child processes that end with their parent: the forkserver dies with the probe that started it, and each child
probe it forks dies with the forkserver (Linux's PR_SET_PDEATHSIG, asked through ctypes; elsewhere nothing changes).

Why: the watchdog ends an overrunning probe at once (os._exit). A forkserver still importing torch at that moment
would serve the request already sent and fork a child that outlives everyone (a gloo rank waiting for its peer for
ever), and that child holds the forkserver's end of the alive pipe, so the forkserver never exits either, and the
forkserver holds the probe's stdout and stderr, so whoever reads the probe's output waits for ever.

children.py names this module first in the forkserver's preload list and starts the forkserver with PARENT_VARIABLE
set to the probe's pid: importing it there arms the forkserver; each forked child calls `die_with_parent` with the
forkserver's pid (SERVER_PID, inherited through the fork) first thing. A forkserver whose probe ended before it got
this far (python's start-up and its imports take a while on a busy machine, and the request is queued already) ends
at once. Anywhere else (the probe itself, a process that is not a forkserver, or without the variable) importing it
does nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PARENT_VARIABLE = "IMAGEBUILD_PROBE_PARENT"
PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent ends; exit now if `parent` (the pid it must be the child of) has ended
    already, before the request took effect."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return  # no prctl (not Linux): the watchdog's kills are all there is
    if os.getppid() != parent:
        os._exit(0)


def _arm_if_forkserver() -> int | None:
    """In the forkserver the probe PARENT_VARIABLE names started: die with that probe, or end now if it has ended
    already (a probe the watchdog ended while this forkserver was still starting: carrying on would serve the request
    already queued and fork a rank nothing kills). -> this process's pid there (the forked children's parent), None
    elsewhere (the probe itself, a process that is not a forkserver, or no variable)."""
    value = os.environ.get(PARENT_VARIABLE, "")
    if not value.isdigit() or int(value) == os.getpid() or not _in_forkserver():
        return None
    die_with_parent(int(value))  # (exits here when the probe is gone: the parent is no longer `value`)
    return os.getpid()


def _in_forkserver() -> bool:
    """Whether this python is a multiprocessing forkserver importing its preload list: `python -c 'from
    multiprocessing.forkserver import main; main(...)'` is how the standard library starts one."""
    return sys.argv[:1] == ["-c"] and "multiprocessing.forkserver" in sys.modules


SERVER_PID = _arm_if_forkserver()
