"""hpc: the image works the way Slurm's container runtimes start it (enroot/pyxis, Apptainer), not only as Docker
does: as the calling user (a UID/GID the image has no passwd/group entry for; the image's USER ignored), a read-only
root filesystem (Apptainer), a HOME bind-mounted from outside and empty, and the host's environment passed in — on
clusters that means PYTHONPATH, LD_LIBRARY_PATH, CUDA_HOME and PIP_* of the login node's modules.

A job's first steps (import torch, compile, find the compile caches, touch the GPU, import TE) run in turn in ONE child
python with this process's environment, as a job takes them (a torch import is seconds of a child's time); each step
answers apart (one that raises or exits ends only itself; one that crashes the child leaves the steps after it to a
child each). When a step fails, it runs again alone without each hostile variable in turn, and the one whose removal
makes it pass is named.

Checks: hpc.identity, home, host_env, torch_import, compile_caches, compile, cuda (skipped with its reason without a
GPU or on a CPU torch), te (TE's rule for a missing driver, probe.te), jupyter and dev_tools (where the image has them).
Runs inside the image with its python; standard library only, imports `probe.*` only. Standalone:
`python -c 'import sys; sys.path.insert(0, "probe.pyz"); from probe.hpcruntime import main; main()'`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

from probe.common import (
    NO_CUDA_TORCH,
    NO_GPU,
    NO_TORCH,
    Probe,
    free_port,
    which,
)
from probe.hpccode import CACHES, CHILD_TIMEOUT, COMPILE, CUDA, TE_IMPORT, TORCH_IMPORT, answers_of, run_code
from probe.te import classify_import_error, driver_present

SECTION = "hpc"
HOSTILE_PREFIXES = ("PIP_",)
HOSTILE_NAMES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "LD_LIBRARY_PATH", "LD_PRELOAD",
                 "CUDA_HOME", "CUDA_PATH", "CPATH", "LIBRARY_PATH", "CONDA_PREFIX", "VIRTUAL_ENV")



def hostile_variables(env=None) -> list:
    """The host variables set here that can change what python and the dynamic loader pick up."""
    env = os.environ if env is None else env
    return sorted(k for k in env if k in HOSTILE_NAMES or k.startswith(HOSTILE_PREFIXES))


def culprit(code: str, timeout: float = CHILD_TIMEOUT):
    """The hostile variable whose removal makes `code` pass, or None."""
    for name in hostile_variables():
        env = {k: v for k, v in os.environ.items() if k != name}
        if run_code(code, env, timeout)[0]:
            return name
    return None


def _run_named(p: Probe, name: str, code: str, what: str, skip=None, answer=None):
    """`code` in a child (`answer`: its (ok, output) already known, from answers_of); a failure names the host
    variable to blame, unless `skip(output)` gives a reason."""
    ok, out = answer or run_code(code, timeout=p.remaining(CHILD_TIMEOUT))
    if ok and out in ("NOCUDA", "NOGPU"):  # the GPU check on a host or image without one
        p.check(name, "skipped", NO_CUDA_TORCH if out == "NOCUDA" else NO_GPU)
        return False
    if ok:
        p.check(name, "passed", "", output=out)
        return True
    reason = skip(out) if skip is not None else None
    if reason:
        p.check(name, "skipped", reason)
        return False
    guilty = culprit(code, timeout=p.remaining(CHILD_TIMEOUT))
    blame = (f"; passes without {guilty}={os.environ.get(guilty, '')!r}: the image must not let the host's {guilty} "
             "in (set it in ENV or unset it in the entrypoint)") if guilty else ""
    p.check(name, "failed", f"{what} failed as uid {os.getuid()}: {out}{blame}")
    return False


def _writable(path: str) -> str:
    """'' when a file can be created in `path` (made if missing), else why not."""
    try:
        os.makedirs(path, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path, prefix=".ibprobe-")
        os.close(fd)
        os.unlink(tmp)
        return ""
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"


def identity(p: Probe):
    import grp
    import pwd

    uid, gid = os.getuid(), os.getgid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = None
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = None
    import getpass

    try:
        login = getpass.getuser()
        login_err = ""
    except Exception as exc:  # KeyError/OSError: no passwd entry and no USER/LOGNAME
        login, login_err = None, f"{type(exc).__name__}: {exc}"
    p.doc.setdefault(SECTION, {})["identity"] = {"uid": uid, "gid": gid, "user": user, "group": group,
                                                  "getuser": login}
    if login_err:
        p.check("hpc.identity", "failed", f"getpass.getuser() fails for uid {uid} without a passwd entry "
                                          f"({login_err}): set USER/LOGNAME in the environment")
    else:
        p.check("hpc.identity", "passed", f"uid {uid} ({user or 'no passwd entry'}), gid {gid} "
                                          f"({group or 'no group entry'}), getuser() = {login}", uid=uid, gid=gid)


def home(p: Probe):
    path = os.environ.get("HOME") or ""
    root_ro = not os.access("/", os.W_OK)
    p.doc.setdefault(SECTION, {})["root_read_only"] = root_ro
    if not path:
        p.check("hpc.home", "failed", "HOME is not set")
        return
    why = _writable(path)
    p.check("hpc.home", "failed" if why else "passed",
            f"HOME={path} is not writable ({why})" if why else f"HOME={path} writable; / "
            + ("read-only" if root_ro else "writable"))


def host_env(p: Probe):
    found = hostile_variables()
    p.doc.setdefault(SECTION, {})["host_env"] = {k: os.environ[k] for k in found}
    leaked = [k for k in ("PYTHONPATH",) if k in os.environ]
    in_path = [d for d in os.environ.get("PYTHONPATH", "").split(os.pathsep) if d and d in sys.path]
    p.check("hpc.host_env", "passed",
            ("host variables present: " + ", ".join(found) if found else "no host python/loader variables set")
            + (f"; PYTHONPATH entries on sys.path: {', '.join(in_path)}" if leaked and in_path else ""))


def compile_caches(p: Probe, answer=None):
    ok, out = answer or run_code(CACHES, timeout=p.remaining(120))
    if not ok:
        p.check("hpc.compile_caches", "failed", f"finding the compile cache folders failed: {out}")
        return
    try:
        dirs = json.loads(out.splitlines()[-1] if out else "{}")
    except ValueError:
        dirs = {}
    p.doc.setdefault(SECTION, {})["caches"] = dirs
    bad = []
    for key, env_name in (("inductor", "TORCHINDUCTOR_CACHE_DIR"), ("triton", "TRITON_CACHE_DIR")):
        path = dirs.get(key)
        if path:
            why = _writable(path)
            if why:
                bad.append(f"{key} cache {why} (set {env_name} to a writable folder, e.g. under /tmp)")
        elif dirs.get(f"{key}_error") and key == "inductor":
            bad.append(f"inductor cache folder unknown: {dirs[f'{key}_error']}")
    p.check("hpc.compile_caches", "failed" if bad else "passed", "; ".join(bad) or
            ", ".join(f"{k} {v}" for k, v in dirs.items() if not k.endswith("_error")))


def _has(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def jupyter(p: Probe):
    exe = which("jupyter")
    if exe is None:
        p.check("hpc.jupyter", "skipped", "no jupyter in the image (runtime flavor)")
        return
    port = free_port()
    cmd = [exe, "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--ServerApp.token=ibprobe",
           "--ServerApp.open_browser=False"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=tempfile.gettempdir(), start_new_session=True)
    try:
        deadline = time.time() + min(90.0, p.remaining(90.0))
        while time.time() < deadline and proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    p.check("hpc.jupyter", "passed", f"jupyter lab listening on port {port} as uid {os.getuid()}")
                    return
            except OSError:
                time.sleep(0.5)
        out = ""
        if proc.poll() is not None and proc.stdout is not None:
            out = " | ".join(proc.stdout.read().strip().splitlines()[-3:])[:800]
        p.check("hpc.jupyter", "failed", f"jupyter lab did not start as uid {os.getuid()} "
                                         f"(HOME={os.environ.get('HOME')}): {out or 'no port within 90 s'}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)


def dev_tools(p: Probe):
    tools = [t for t in ("git", "gdb", "ipython", "pytest", "ruff") if which(t)]
    if not which("jupyter"):
        p.check("hpc.dev_tools", "skipped", "not a dev image (no jupyter)")
        return
    bad = []
    for tool in tools:
        try:
            proc = subprocess.run([which(tool), "--version"], capture_output=True, text=True, timeout=60,
                                  cwd=tempfile.gettempdir())
            if proc.returncode != 0:
                bad.append(f"{tool}: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            bad.append(f"{tool}: {exc}")
    p.check("hpc.dev_tools", "failed" if bad else "passed", "; ".join(bad) or f"{', '.join(tools)} start")


def run(p: Probe):
    identity(p)
    home(p)
    host_env(p)
    has_te = _has("transformer_engine")
    answers = {}
    if not _has("torch"):
        for name in ("hpc.torch_import", "hpc.compile_caches", "hpc.compile", "hpc.cuda"):
            p.check(name, "skipped", NO_TORCH)
    else:
        # a job's first steps in one child, as a job takes them (compile before anything imports Inductor: it reads
        # its settings then; TE last: its import is the likeliest to crash the child)
        answers = answers_of((("import", TORCH_IMPORT), ("compile", COMPILE), ("caches", CACHES), ("cuda", CUDA))
                           + ((("te", TE_IMPORT),) if has_te else ()), timeout=p.remaining(CHILD_TIMEOUT))
        if _run_named(p, "hpc.torch_import", TORCH_IMPORT, "import torch", answer=answers["import"]):
            compile_caches(p, answer=answers["caches"])
            _run_named(p, "hpc.compile", COMPILE, "torch.compile", answer=answers["compile"])
            _run_named(p, "hpc.cuda", CUDA, "a CUDA tensor", answer=answers["cuda"])
        else:
            for name in ("hpc.compile_caches", "hpc.compile", "hpc.cuda"):
                p.check(name, "skipped", "torch does not import")
    if has_te:
        _run_named(p, "hpc.te", TE_IMPORT, "import transformer_engine.pytorch", skip=_te_needs_driver,
                   answer=answers.get("te"))
    else:
        p.check("hpc.te", "skipped", "transformer_engine is not in this image")
    jupyter(p)
    dev_tools(p)


def _te_needs_driver(out: str):
    """The te section's rule (probe.te): without a driver, an import that lacks only libcuda is not a broken install."""
    status, reason = classify_import_error(out, driver_present())
    return reason if status == "skipped" else None


def main(argv=None) -> int:
    """Run this section alone and print the probe's JSON document (stdout carries only the JSON)."""
    probe = Probe([SECTION])
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    run(probe)
    os.write(out_fd, json.dumps(probe.doc, default=str).encode() + b"\n")
    return 0
