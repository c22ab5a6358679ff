"""One preloaded parent for the probe's child probes (the compile child, the gloo/NCCL ranks, the TE and release
children): a python that imports torch ONCE and forks every child from that state. Each child used to be a fresh
python importing torch itself: ~2.3 s of a core per child on a 2-vCPU runner (the compile child and two gloo ranks
in a CPU image's suite; one rank per GPU on a GPU node).

Why forking it is safe: nothing runs in the zygote after `import torch`. No tensor op (OpenMP's thread pool starts
at the first one, and GNU libgomp hangs in a child forked after that), no CUDA (a child cannot use a CUDA context its
parent made; each rank initialises its own). numpy's OpenBLAS server thread, started at import, handles fork itself.
A forked child then runs exactly what a fresh child probe runs (`probe.__main__.main(ARGS)`), in a session of its
own, with the caller's environment and working directory, its output in files.

Requests go to the zygote's stdin, one JSON line each: {"args", "env", "cwd", "out", "err", "status"}; it forks,
writes the child's pid to STATUS.pid and, once it has reaped the child, its exit status (Popen's convention: -N for
signal N) to STATUS. The caller sees a ZygoteChild, which answers as much of subprocess.Popen as the probe uses
(pid, poll, wait, kill, returncode), so the watchdog and the sections treat both alike. What the child reports
never depends on the zygote: where it cannot start (no torch, torch does not import, it died before forking a
child), that child runs as a fresh python (child_argv), as before.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

from probe.common import CHILDREN, child_argv, rmtree, start_process, stop_process

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
        end = None if timeout is None else time.time() + timeout
        pause = 0.01
        while self.poll() is None:
            if end is not None and time.time() >= end:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(pause)
            pause = min(0.1, pause * 2)
        return self.returncode

    def kill(self):
        self.killed = True
        try:
            os.killpg(self.pid, 9)
        except OSError:
            pass


class Zygote:
    """The probe's side of the zygote: started on the first child, ended at exit (stdin closed: it reaps what is
    left and ends)."""

    def __init__(self):
        self.proc, self.dir, self.count = None, None, 0

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="ibprobe-zygote-")
        with open(os.path.join(self.dir, "zygote.log"), "wb") as log:
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


# the zygote's side ----------------------------------------------------------------------------------------------
def serve(run_main) -> int:
    """`python probe.pyz --zygote`: import torch, then fork a child running `run_main(ARGS)` per request on stdin
    until it closes; reap each child and write its exit status."""
    import select
    import warnings

    warnings.simplefilter("ignore", DeprecationWarning)  # python >= 3.12: "fork of a multi-threaded process"
    # what the compile child sets before Inductor reads its config (torch_compile.child), where the config were read
    # at `import torch` (it is not, in torch 2.7 to 2.13): without it Inductor would start a pool of workers
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    try:
        import torch  # noqa: F401  (the state every child starts from)
    except BaseException as exc:  # the callers spawn their children instead
        sys.stderr.write(f"zygote: torch does not import: {type(exc).__name__}: {exc}\n")
        return 1
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
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds):
            if fd > 2:
                os.close(fd)
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
            _write(path, str(-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)))
        if block:
            return


def _write(path, text):
    """Write atomically: a reader sees the whole value or no file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


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
