"""The zygote's own side (probe/zygote.py is the caller's): a python that has imported torch and run nothing else,
forking one child probe per request read from its stdin, one JSON line each: {"args", "env", "cwd", "out", "err",
"status"}. It writes each child's pid to STATUS.pid and, once it has reaped the child, its exit status (Popen's
convention: -N for signal N) to STATUS; it ends when its stdin closes, after reaping what is left.

Two ways to become one: `python probe.pyz --zygote` imports torch itself (serve); or the suite's main probe, once it
has imported torch for its own sections and before it runs any of them, forks it from itself (fork_here): one torch
import fewer per probe run (~2.3 s of a core on a 2-vCPU runner), the same state (nothing but `import torch` has run
in either: no tensor op, so no OpenMP pool, which GNU libgomp cannot carry across a fork; no CUDA).
"""

from __future__ import annotations

import json
import os
import select
import sys
import traceback
import warnings

from probe.common import CHILDREN


def serve(run_main) -> int:
    """`python probe.pyz --zygote`: import torch, then serve until stdin closes."""
    _quiet_fork_warning()
    # what the compile child sets before Inductor reads its config (torch_compile.child), where the config were read
    # at `import torch` (it is not, in torch 2.7 to 2.13): without it Inductor would start a pool of workers
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    try:
        import torch  # noqa: F401  (the state every child starts from)
    except BaseException as exc:  # the callers spawn their children instead
        sys.stderr.write(f"zygote: torch does not import: {type(exc).__name__}: {exc}\n")
        return 1
    return _loop(run_main)


def fork_here(run_main, log_path, close_fds=()):
    """Fork the zygote from this process (which has imported torch and run nothing else) -> (its pid, the write end
    of its request pipe). The zygote takes its stdin from that pipe, its stderr to `log_path`, closes `close_fds`
    (the probe's JSON output: its caller reads it to its end, and a copy the zygote held would keep it open), starts
    a session of its own and forgets this process's children. Only the named fds are closed: a library's own fd
    closed under it could be reused by a child's file."""
    read_end, write_end = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid:
        os.close(read_end)
        return pid, os.fdopen(write_end, "wb")
    rc = 1
    try:
        os.close(write_end)  # else the zygote would never read the end of its own requests
        os.setsid()
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        _take_fds((read_end, os.open(os.devnull, os.O_WRONLY), log), close_fds)
        sys.stdout = sys.__stdout__
        CHILDREN.clear()
        _quiet_fork_warning()
        rc = _loop(run_main)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(rc)


def _quiet_fork_warning():
    warnings.simplefilter("ignore", DeprecationWarning)  # python >= 3.12: "fork of a multi-threaded process"


def _take_fds(fds, close_fds=()):
    """Make `fds` this process's stdin, stdout and stderr; close the originals and `close_fds` (never 0-2)."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(tuple(fds) + tuple(close_fds)):
        if fd > 2:
            os.close(fd)


def exit_status(status) -> int:
    """A waitpid status in Popen's convention: the exit code, or -N for signal N."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _loop(run_main) -> int:
    """Fork a child running `run_main(ARGS)` per request on stdin until it closes; reap each child and write its
    exit status."""
    children: dict = {}
    pending = b""
    while True:
        ready, _, _ = select.select([0], [], [], 0.05 if children else None)
        if ready:
            data = os.read(0, 65536)
            if not data:
                break
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                req = json.loads(line)
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(req, run_main)  # never returns
                children[pid] = req["status"]
                _write(req["status"] + ".pid", str(pid))
        _reap(children, block=False)
    while children:
        _reap(children, block=True)
    return 0


def _child(req, run_main):
    """In the forked child: become what a fresh child probe is (own session, stdin empty, output in its files, the
    caller's environment and directory), run the probe's main, exit without the zygote's exit handlers."""
    rc = 1
    try:
        os.setsid()
        fds = [os.open(os.devnull, os.O_RDONLY), os.open(req["out"], os.O_WRONLY | os.O_APPEND)]
        fds.append(fds[1] if req["err"] == req["out"] else os.open(req["err"], os.O_WRONLY | os.O_APPEND))
        _take_fds(fds)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        sys.argv = sys.argv[:1] + req["args"]
        rc = run_main(req["args"]) or 0
    except SystemExit as exc:  # as python's own exit: a message goes to stderr, with status 1
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(rc)


def _reap(children, block):
    while children:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        path = children.pop(pid, None)
        if path:
            _write(path, str(exit_status(status)))
        if block:
            return


def _write(path, text):
    """Write atomically: a reader sees the whole value or no file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
