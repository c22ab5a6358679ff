"""One preloaded parent for the probe's child probes (the compile child, the gloo/NCCL ranks, the TE and release
children): a python that imports torch ONCE and forks every child from that state. Each child used to be a fresh
python importing torch itself: ~2.3 s of a core per child on a 2-vCPU runner (the compile child and two gloo ranks
in a CPU image's suite; one rank per GPU on a GPU node).

Why forking it is safe: nothing runs in the zygote after `import torch`. No tensor op (OpenMP's thread pool starts
at the first one, and GNU libgomp hangs in a child forked after that), no CUDA (a child cannot use a CUDA context its
parent made; each rank initialises its own). numpy's OpenBLAS server thread, started at import, handles fork itself.
A forked child then runs exactly what a fresh child probe runs (`probe.__main__.main(ARGS)`), in a session of its
own, with the caller's environment and working directory, its output in files.

Requests go to the zygote's stdin (probe/zygote_serve.py: the zygote's side; the suite's main probe forks it from
itself once it has imported torch, any other caller starts `probe.pyz --zygote`). The caller sees a ZygoteChild,
which answers as much of subprocess.Popen as the probe uses (pid, poll, wait, kill, returncode), so the watchdog and
the sections treat both alike. What the child reports never depends on the zygote: where it cannot start (no torch,
torch does not import, it died before forking a child), that child runs as a fresh python (child_argv), as before.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import subprocess
import tempfile
import time
from typing import Any

from probe.common import CHILDREN, child_argv, rmtree, start_process, stop_process
from probe.zygote_serve import exit_status, fork_here

LOST = 255  # the exit status of a forked child whose status died with the zygote


class ZygoteChild:
    """A child probe forked by the zygote, seen as a subprocess.Popen."""

    def __init__(self, zygote_proc, args, env, cwd, out, err, status):
        self.zygote, self.args, self.env, self.cwd = zygote_proc, args, env, cwd
        self.out, self.err, self.status = out, err, status
        self.returncode = None
        self.fallback = None  # the fresh python run instead, where the zygote never forked this child
        self.killed = False

    def _pid(self):
        return _read_int(self.status + ".pid")

    @property
    def pid(self):
        """This child's pid (its session); the zygote's while it has not forked it yet (killing that prevents it)."""
        if self.fallback is not None:
            return self.fallback.pid
        return self._pid() or self.zygote.pid

    def poll(self):
        if self.returncode is not None:
            return self.returncode
        if self.fallback is not None:
            self.returncode = self.fallback.poll()
            return self.returncode
        rc = _read_int(self.status)
        if rc is None and self.zygote.poll() is not None:  # the zygote is gone: it writes no status now
            pid = self._pid()
            if pid is None:  # never forked
                if self.killed:
                    rc = -9
                else:
                    self.fallback = _spawn(self.args, self.env, self.cwd, self.out, self.err)
                    return None
            elif not _alive(pid):
                rc = _read_int(self.status)  # written just before the zygote ended
                if rc is None:
                    rc = LOST
                    _note(self.err, "child probe: its exit status was lost with the zygote")
        self.returncode = rc
        return rc

    def wait(self, timeout=None):
        return _wait(self, timeout)

    def kill(self):
        self.killed = True
        try:
            os.killpg(self.pid, 9)
        except OSError:
            pass


class ForkedZygote:
    """The zygote this process forked (start_here), seen as the subprocess.Popen the rest of this module uses."""

    def __init__(self, pid, stdin):
        self.pid, self.stdin, self.args = pid, stdin, ["zygote"]
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: gone, its status unknown
                self.returncode = LOST
                return self.returncode
            if pid:
                self.returncode = exit_status(status)
        return self.returncode

    def wait(self, timeout=None):
        return _wait(self, timeout)


def _wait(proc, timeout):
    """Popen.wait for a process polled by `proc.poll()`."""
    end = None if timeout is None else time.time() + timeout
    pause = 0.01
    while proc.poll() is None:
        if end is not None and time.time() >= end:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        time.sleep(pause)
        pause = min(0.1, pause * 2)
    return proc.returncode


class Zygote:
    """The probe's side of the zygote: started on the first child, ended at exit (stdin closed: it reaps what is
    left and ends)."""

    def __init__(self):
        self.proc: Any = None  # a Popen, or a ForkedZygote that answers as one
        self.dir = ""
        self.count = 0

    def start(self, run_main=None, close_fds=()):
        """Start `probe.pyz --zygote`; or, given the probe's `run_main`, fork the zygote from this process, which has
        imported torch and run nothing else (fork_here)."""
        self.dir = tempfile.mkdtemp(prefix="ibprobe-zygote-")
        log_path = os.path.join(self.dir, "zygote.log")
        if run_main is not None:
            self.proc = ForkedZygote(*fork_here(run_main, log_path, close_fds))
        else:
            with open(log_path, "wb") as log:
                self.proc = subprocess.Popen(child_argv(["--zygote"]), stdin=subprocess.PIPE,
                                             stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        CHILDREN.append(self.proc)
        atexit.register(self.stop)

    def fork(self, args, env, cwd, out, err):
        """Ask for a child; None where the zygote cannot take the request (it ended)."""
        if self.proc is None or self.proc.poll() is not None or self.proc.stdin is None:
            return None
        self.count += 1
        status = os.path.join(self.dir, f"child-{self.count}")
        req = {"args": list(args), "env": env, "cwd": cwd, "out": out.name, "err": err.name, "status": status}
        try:
            self.proc.stdin.write(json.dumps(req).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            return None
        child = ZygoteChild(self.proc, list(args), env, cwd, out, err, status)
        CHILDREN.append(child)
        return child

    def stop(self):
        if self.proc is None:
            return
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            stop_process((self.proc,))
        rmtree(self.dir)
        self.proc = None


_ZYGOTE = Zygote()


def start_here(run_main, close_fds=()):
    """The suite's main probe, after its own `import torch` and before any section runs: the zygote its children
    are forked from is forked from this process (no second torch import). Once per process."""
    if _ZYGOTE.proc is None:
        _ZYGOTE.start(run_main, close_fds)


def launch(args, env=None, merged=False):
    """Start the child probe `args` (what `child_argv(args)` runs) with `env` (default: this process's) -> the handle
    common.finish_process takes: (process, stdout file, stderr file), the same file twice when `merged`. Forked by
    the zygote where torch is installed (starting it on the first child), else a fresh python."""
    env = dict(os.environ if env is None else env)
    cwd = os.getcwd()
    out = tempfile.NamedTemporaryFile(prefix="ibprobe-child-", suffix=".out")
    err = out if merged else tempfile.NamedTemporaryFile(prefix="ibprobe-child-", suffix=".err")
    proc = None
    if importlib.util.find_spec("torch") is not None:
        if _ZYGOTE.proc is None:
            _ZYGOTE.start()
        proc = _ZYGOTE.fork(args, env, cwd, out, err)
    if proc is None:
        proc = _spawn(args, env, cwd, out, err)
    return proc, out, err


def _spawn(args, env, cwd, out, err):
    """The child as a fresh python (what every child was before the zygote)."""
    return start_process(child_argv(args), env, cwd, out, err)[0]


def _read_int(path):
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _alive(pid) -> bool:
    """Is `pid` running (a zombie is not)?"""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True


def _note(fh, text):
    """Add `text` to a child's output file."""
    try:
        fh.write(("\n" + text + "\n").encode())
        fh.flush()
    except (OSError, ValueError):
        pass
