"""The probe's end on overrun (`--timeout`): the watchdog writes what was gathered so far, marked as timed out, kills
the child probes, removes the children's files and exits 3, at once (os._exit: a section stuck in C code never
returns). OUTPUT decides who writes the one JSON document on stdout: the watchdog, or main's end, never both."""

from __future__ import annotations

import json
import os
import shutil
import threading

from probe.common import CHILDREN, Probe, kill_tree

TEMP_PATHS: list = []  # files and folders the children need (named): the watchdog removes them as it ends the probe
OUTPUT = threading.Lock()  # who takes it writes the one JSON on stdout: the watchdog, before it kills, or main's end


def write_all(fd, data: bytes):
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _remove(paths):
    """Remove these files and folders, as far as it goes (never raises)."""
    for path in paths:
        try:
            shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
        except OSError:
            pass


def watchdog(seconds: float, probe: Probe, out_fd: int) -> threading.Timer:
    """On overrun, emit what was gathered so far (marked) and exit 3; OUTPUT first (see there): always JSON."""

    def fire():
        if not OUTPUT.acquire(blocking=False):  # the probe is writing its result already: it ends on its own
            return
        for p in CHILDREN:  # (the forkserver and anything it is still forking die with this process: lifeline.py)
            if p.poll() is None:
                kill_tree(p)
        probe.doc["probe"]["errors"].append(f"probe timed out after {seconds:.0f} s")
        probe.doc["probe"]["timed_out"] = True
        try:
            write_all(out_fd, json.dumps(probe.doc, default=str).encode() + b"\n")
        finally:
            _remove(TEMP_PATHS)  # (os._exit skips their own clean-up)
            os._exit(3)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()
    return t
