"""Shared by every check module: constants, the Probe (results, torch import, GPU state, section loop), small
process/file helpers and the watchdog. Standard library only; never imports imagebuild."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable
from typing import Any

from probe.table import DEFAULT_SECTIONS, SECTIONS  # noqa: F401  (re-exported: the probe's own names for them)

PROBE_VERSION = 1
NO_GPU = "no GPU visible in the container"
NO_CUDA_TORCH = NO_GPU + " (CPU variant: torch built without CUDA)"
NO_TORCH = "torch is not installed"
RESULT_MARK = "IBPROBE-RESULT "
WATCHDOG_FIRST = 1.0  # seconds a section's wait runs past the deadline: the watchdog is the one that ends it there
CHILDREN: list = []  # Popen objects (own sessions) the watchdog kills on overrun


class Probe:
    """One probe run: the selected sections, the JSON document they fill (`doc`), torch once imported, the GPU state.
    `host`: the probe runs on a bare host (scripts/gpu-probe.sh), not inside an image: checks that judge the image's
    contents (libraries.one_copy) judge what a process there can load instead."""

    def __init__(self, sections: Iterable[str], perf: bool = False, deadline: float | None = None,
                 host: bool = False) -> None:
        self.sections = list(sections)
        self.perf = perf
        self.deadline = deadline
        self.host = host
        self.doc: dict = {"probe": {"version": PROBE_VERSION, "sections": self.sections, "errors": [],
                                    "context": "host" if host else "image"}, "checks": []}
        self.torch: Any = None  # the torch module once imported (import_torch)
        self.torch_error: str | None = None
        self._gpu: tuple[bool, str] | None = None
        self.started: dict = {}  # section -> the handle of its child probe started ahead (start_child)
        self.yield_to_children = False  # a child started ahead is the probe's longest chain (start(probe) says so)

    # results ----------------------------------------------------------------------------------------------------
    def check(self, name, status, reason="", **figures):
        section = name.split(".", 1)[0]
        self.doc["checks"].append({"name": name, "section": section, "status": status, "reason": reason,
                                   "figures": figures})
        return status

    def remaining(self, default):
        """Seconds a section may wait for its work: `default`, cut to what is left before the probe's deadline plus
        WATCHDOG_FIRST: at the deadline the watchdog ends the probe (partial JSON, exit 3), never a section's own
        timeout racing it to the same instant (which one printed the JSON was chance)."""
        if self.deadline is None:
            return default
        return max(5.0, min(default, self.deadline - time.time() + WATCHDOG_FIRST))

    # torch ------------------------------------------------------------------------------------------------------
    def import_torch(self):
        if self.torch is not None or self.torch_error is not None:
            return self.torch
        t0 = time.time()
        try:
            import warnings

            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                import torch  # noqa: F401
            self.torch = torch
            self.doc["torch_import"] = {"seconds": round(time.time() - t0, 3),
                                        "warnings": [str(w.message)[:300] for w in caught][:10]}
            # the policy as a fresh process sees it, before any section touches a flag
            from probe.tf32 import tf32_state

            self.doc["tf32_at_import"] = tf32_state(torch)
        except Exception as exc:  # ImportError, OSError on missing libs, RuntimeError ...
            self.torch_error = f"{type(exc).__name__}: {exc}"
            self.doc["torch_import"] = {"seconds": round(time.time() - t0, 3), "error": self.torch_error}
        return self.torch

    def gpu_state(self):
        """(usable, reason): can GPU checks run?"""
        if self._gpu is None:
            torch = self.import_torch()
            if torch is None:
                self._gpu = (False, NO_TORCH if self.torch_error is None or "No module named" in self.torch_error
                             else f"torch import failed: {self.torch_error}")
            elif not getattr(torch.version, "cuda", None):
                self._gpu = (False, NO_CUDA_TORCH)
            else:
                try:
                    ok = torch.cuda.is_available() and torch.cuda.device_count() > 0
                except Exception as exc:
                    ok, self.doc["probe"]["errors"] = False, self.doc["probe"]["errors"] + [f"cuda: {exc}"]
                self._gpu = (True, "") if ok else (False, NO_GPU)
        return self._gpu

    # run --------------------------------------------------------------------------------------------------------
    def run(self, runners, starters=None):
        """Run the selected sections in the table's order; `runners`: section -> function(probe). `starters`:
        section -> function(probe) that starts the section's child probe before the first section runs, so that
        its work (a cold torch.compile) overlaps the sections before it; its run() then collects the result."""
        t0 = time.time()
        timings = {}
        for section, start in (starters or {}).items():
            if section in self.sections:
                try:
                    start(self)
                except Exception as exc:  # its run() starts it again and reports what goes wrong
                    self.doc["probe"]["errors"].append(f"{section}: start: {type(exc).__name__}: {exc}")
        if self.yield_to_children:
            yield_cpu()
        for section in SECTIONS:
            if section not in self.sections:
                continue
            s0 = time.time()
            try:
                runners[section](self)
            except Exception as exc:
                tb = traceback.format_exc(limit=6)
                self.doc["probe"]["errors"].append(f"{section}: {type(exc).__name__}: {exc}")
                self.check(f"{section}.probe", "failed", f"probe section crashed: {type(exc).__name__}: {exc}",
                           traceback=tb[-2000:])
            timings[section] = round(time.time() - s0, 3)
        self.doc["probe"]["section_seconds"] = timings
        self.doc["probe"]["seconds"] = round(time.time() - t0, 3)
        return self.doc


# How far the probe's own work (and what it spawns) steps back from the child started ahead: its longest chain.
YIELD_NICE = 10  # the forkserver (probe.children) starts before the probe steps back: its children keep its nice


def yield_cpu(step=YIELD_NICE):
    """Lower this process's CPU priority by `step` (where the OS has nice); never fails the probe."""
    try:
        os.nice(step)
    except (AttributeError, OSError):
        pass


def which(name):
    for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/sbin"]:
        p = os.path.join(d, name)
        if d and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def installed_version(*names):
    """(distribution, version) of the first of `names` installed in this Python, else (None, None)."""
    from importlib import metadata

    for name in names:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None, None


def rmtree(path):
    shutil.rmtree(path, ignore_errors=True)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# the zipapp (or the directory holding the `probe` package) this process runs from: child probes re-run it
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BOOT = "import sys; sys.path.insert(0, sys.argv.pop(1)); from probe.__main__ import main; sys.exit(main())"


def child_argv(args) -> list:
    """The command line of a child probe (`--dist-worker`, `--child SECTION`) running this same probe code. From a
    zipapp (`python probe.pyz`): `python probe.pyz ARGS`. From the package directory (`python -m probe`,
    `imagebuild.smoke.probe`): `python -c BOOT PARENT ARGS`, which imports `probe` from its parent directory only."""
    if os.path.isfile(_ROOT):  # .../probe.pyz/probe/common.py
        return [sys.executable, _ROOT] + list(args)
    return [sys.executable, "-c", _BOOT, _ROOT] + list(args)


def start_process(argv, env=None, cwd=None, out=None, err=None):
    """Start `argv` in a session of its own (the watchdog kills it and what it started on overrun), its output in
    `out` and `err` (default: unnamed temporary files). -> the handle finish_process takes; OSError if it cannot start."""
    out = tempfile.TemporaryFile() if out is None else out
    err = tempfile.TemporaryFile() if err is None else err
    proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=cwd, start_new_session=True)
    CHILDREN.append(proc)
    return proc, out, err


def finish_process(handle, timeout):
    """(exit status, or None when it was killed after `timeout`; stdout; stderr) of a started process."""
    proc, out, err = handle
    try:
        proc.wait(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        stop_process(handle)
        rc = None
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    out.close()
    err.close()
    return rc, stdout, stderr


def kill_tree(proc):
    """SIGKILL a started process and its session (what it started); the process alone when it has no session of its
    own yet (a forked child killed before its setsid)."""
    try:
        os.killpg(proc.pid, 9)
    except OSError:
        try:
            os.kill(proc.pid, 9)
        except OSError:
            pass


def stop_process(handle):
    """Kill a started process (and what it started) and reap it."""
    proc = handle[0]
    if proc.poll() is None:
        kill_tree(proc)
    proc.wait()


def start_child(args):
    """Start a child probe (probe.children: forked by the forkserver where torch is installed): the handle
    finish_child takes."""
    from probe.children import launch
    return launch(args)


def finish_child(handle, timeout):
    """The JSON document a started child probe printed, or {"error": why not} (it is killed after `timeout`)."""
    rc, stdout, stderr = finish_process(handle, timeout)
    if rc is None:
        return {"error": f"child probe timed out after {timeout:.0f} s"}
    try:
        return json.loads(stdout)
    except ValueError:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        return {"error": f"child probe exited {rc}: {' | '.join(tail)}"[:1500]}


stop_child = stop_process


def run_child(args, timeout):
    return finish_child(start_child(args), timeout)


def listdir(d):
    try:
        return os.listdir(d)
    except OSError:
        return []
