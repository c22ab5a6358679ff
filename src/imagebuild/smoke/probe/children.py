"""Child probes (the compile child, the gloo/NCCL ranks, the TE and release children): each runs what
`python probe.pyz ARGS` runs (probe.__main__.main), in a session of its own (the watchdog kills it and what it
started), with the caller's environment and working directory, its output in files.

Where torch is installed they come from the standard library's forkserver (multiprocessing's "forkserver" context,
torch preloaded): one python imports torch once and forks each child from that state, in which nothing but
`import torch` has run (no tensor op, so no OpenMP pool; no CUDA, which each rank initialises itself). Elsewhere,
and wherever the forkserver cannot start a child (a torch whose import crashes it), the child is a fresh python
(common.child_argv) started by subprocess. What a child reports never depends on which of the two started it.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import subprocess
import sys
import tempfile
from multiprocessing.context import ForkServerProcess

from probe import lifeline
from probe.common import _ROOT, CHILDREN, child_argv, start_process
from probe.environ import environ_set
from probe.watchdog import TEMP_PATHS

_FORKSERVER: list = []  # [the forkserver context] once set up; [None] when it cannot start children here


class Forked(ForkServerProcess):
    """A child forked by the forkserver, answering the part of subprocess.Popen the probe uses of a child
    (returncode, poll, wait), so that the watchdog and the sections treat both kinds alike."""

    @property
    def returncode(self):
        return self.exitcode

    def poll(self):
        return self.exitcode

    def wait(self, timeout=None):
        self.join(timeout)
        if self.exitcode is None:
            raise subprocess.TimeoutExpired(str(self.name), timeout or 0)
        return self.exitcode


def launch(args, env=None, merged=False):
    """Start the child probe `args` with `env` (default: this process's) -> the handle common.finish_process takes:
    (process, stdout file, stderr file), the same file twice when `merged`."""
    env = dict(os.environ if env is None else env)
    cwd = os.getcwd()
    out = tempfile.NamedTemporaryFile(prefix="ibprobe-child-", suffix=".out")
    err = out if merged else tempfile.NamedTemporaryFile(prefix="ibprobe-child-", suffix=".err")
    context = _forkserver()
    TEMP_PATHS.extend({out.name, err.name})
    if context is not None:
        proc = Forked(target=_run, args=(list(args), env, cwd, out.name, err.name), name="probe-child")
        try:
            proc.start()
        except Exception:  # the forkserver died (torch's import crashed it): fresh pythons from now on
            _FORKSERVER[:] = [None]
        else:
            CHILDREN.append(proc)
            return proc, out, err
    return start_process(child_argv(args), env, cwd, out, err)


def _forkserver():
    """The forkserver context (torch preloaded) where torch is installed and this probe's package is importable
    from sys.path (the zipapp, or its parent directory: the forkserver's children import it by that name);
    else None."""
    if not _FORKSERVER:
        usable = (importlib.util.find_spec("torch") is not None
                  and any(os.path.abspath(p) == _ROOT for p in sys.path if p))
        context = None
        if usable:
            context = multiprocessing.get_context("forkserver")
            # lifeline first: the forkserver dies with this probe, and so does every child it forks (lifeline.py)
            context.set_forkserver_preload(["probe.lifeline", "torch"])
            try:
                _start_forkserver()
            except Exception:  # (the standard library's own errors: no forkserver here, fresh pythons instead)
                context = None
        _FORKSERVER.append(context)
    return _FORKSERVER[0]


def _start_forkserver():
    """Start the forkserver now, with this probe's pid in lifeline.PARENT_VARIABLE and its package on PYTHONPATH:
    the forkserver imports its preload list before it applies the sys.path it is given, so `probe.lifeline` would
    not be found there otherwise. Both variables are this process's again afterwards (the children get the caller's
    environment in any case: _run)."""
    from multiprocessing import forkserver, util

    path = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)
    with environ_set({lifeline.PARENT_VARIABLE: str(os.getpid()), "PYTHONPATH": path}):
        forkserver.ensure_running()
    TEMP_PATHS.append(util.get_temp_dir())  # (the folder of the forkserver's socket)


def _run(args, env, cwd, out, err):
    """In the forked child: become what a fresh child probe is (a session of its own, stdin empty, output in its
    files, the caller's environment, directory and argv), then run the probe's main; its exit status is the
    child's. It dies with the forkserver (lifeline.py), which dies with the probe that started it."""
    if lifeline.SERVER_PID is not None:
        lifeline.die_with_parent(lifeline.SERVER_PID)
    os.setsid()
    fds = [os.open(os.devnull, os.O_RDONLY), os.open(out, os.O_WRONLY | os.O_APPEND)]
    fds.append(fds[1] if err == out else os.open(err, os.O_WRONLY | os.O_APPEND))
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = sys.argv[:1] + args
    from probe.__main__ import main

    sys.exit(main(args))
