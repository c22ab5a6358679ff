"""The programs the hpc section (probe/hpcruntime.py) runs in child pythons of the hpc container, what a job on a
cluster does first (import torch, compile, find its compile caches, touch the GPU, import TE), and how a child
answers them (run_code: one; answers_of: several in one child). Standard library only: the programs are strings."""

from __future__ import annotations

import json
import os
import sys
import tempfile

from probe.common import finish_process, start_process

CHILD_TIMEOUT = 600

TORCH_IMPORT = "import torch; x = torch.ones(2) + 1; assert float(x.sum()) == 4.0; print(torch.__version__)"
# Inductor's vector-ISA checks (a dry compile and a dlopen per ISA the CPU has: half a cold compile's time) are
# skipped here: a failing one only turns vectorisation off, never fails a compile, so they cannot change this
# check's outcome; they run (and are judged, release.cpu_isa) in the main container. So is the precompiled header
# Inductor builds before its first kernel (g++ of its kernel prelude, into the same cache folder, in the same
# environment as the kernel's own g++ that still runs here): the main container's compile section builds and uses one
COMPILE = ("import os\nos.environ.setdefault('TORCHINDUCTOR_VEC_ISA_OK', '0')\n"
           "os.environ.setdefault('TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS', '0')\n"
           "import torch\nf = lambda x: torch.sin(x) * 2 + x.cos()\nx = torch.randn(64)\n"
           "assert torch.allclose(torch.compile(f)(x), f(x), atol=1e-5), 'compiled result differs from eager'\n"
           "print('ok')\n")
CACHES = """
import json, os
out = {}
try:
    from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_dir
    out["inductor"] = inductor_dir()
except Exception as exc:
    try:
        from torch._inductor.utils import cache_dir as inductor_dir
        out["inductor"] = inductor_dir()
    except Exception as exc2:
        out["inductor_error"] = f"{type(exc2).__name__}: {exc2}"
try:
    from triton.runtime.cache import default_cache_dir
    out["triton"] = os.environ.get("TRITON_CACHE_DIR") or default_cache_dir()
except Exception as exc:
    out["triton_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""
CUDA = """
import sys, torch
if not torch.version.cuda or not torch.cuda.is_available():
    print("NOCUDA" if not torch.version.cuda else "NOGPU"); sys.exit(0)
x = torch.ones(4, device="cuda")
assert float((x * 2).sum()) == 8.0
print("ok", torch.cuda.get_device_name(0))
"""
TE_IMPORT = "import transformer_engine, transformer_engine.pytorch as te; print(transformer_engine.__version__)"

# One child python answers several of these programs in turn (each with globals of its own, its stdout captured; an
# exception or sys.exit ends only that program): a torch import costs a child seconds, and a job imports it once.
# Each program's answer is one line: STAGE_MARK + {"stage", "ok", "out"} (out: its output, or its error).
STAGE_MARK = "IBPROBE-STAGE "
_TOGETHER = """
import contextlib, io, json, sys, traceback
for name, code in STAGES:
    buf = io.StringIO()
    ok = True
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(code, "<" + name + ">", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        ok = exc.code in (None, 0)
        if not ok:
            buf.write(str(exc.code))
    except BaseException:
        ok = False
        buf = io.StringIO(traceback.format_exc())
    sys.stdout.write(MARK + json.dumps({"stage": name, "ok": ok, "out": buf.getvalue()}) + "\\n")
    sys.stdout.flush()
"""


def together(stages) -> str:
    """The python program that runs each (name, code) of `stages` in turn in one interpreter (see STAGE_MARK)."""
    return f"STAGES = {list(stages)!r}\nMARK = {STAGE_MARK!r}\n" + _TOGETHER


def start_code(code: str, env=None):
    """Start `python -c code`: the handle finish_code takes, or (None, why it did not start)."""
    try:
        return start_process([sys.executable, "-c", code], env=dict(os.environ if env is None else env),
                             cwd=tempfile.gettempdir())
    except OSError as exc:
        return None, f"{sys.executable}: {exc}"


def finish_code(handle, timeout: float = CHILD_TIMEOUT):
    """(ok, last lines of output) of a started child; killed after `timeout`."""
    if handle[0] is None:
        return False, handle[1]
    rc, stdout, stderr = finish_process(handle, timeout)
    if rc is None:
        return False, f"timed out after {timeout:.0f} s"
    return rc == 0, tail(stdout if rc == 0 else (stderr or stdout))


def tail(text: str) -> str:
    return " | ".join(text.strip().splitlines()[-3:])[:800]


def answers_of(stages, timeout: float = CHILD_TIMEOUT) -> dict:
    """name -> (ok, last lines of output) of each (name, code) of `stages`, run in turn in ONE child python (a torch
    import is seconds of a child's time; a job imports torch once). A program the child did not answer (it crashed,
    or did not start) runs in a child of its own; the one it was killed in is answered with the timeout, and the
    ones after it run on their own."""
    stages = list(stages)
    handle = start_code(together(stages))
    answers = {}
    timed_out = False
    if handle[0] is not None:
        rc, stdout, _ = finish_process(handle, timeout)
        timed_out = rc is None
        for line in stdout.splitlines():
            if line.startswith(STAGE_MARK):
                try:
                    doc = json.loads(line[len(STAGE_MARK):])
                    answers[doc["stage"]] = (bool(doc["ok"]), tail(str(doc["out"])))
                except (ValueError, KeyError, TypeError):
                    continue
    for name, code in stages:
        if name in answers:
            continue
        if timed_out:
            answers[name] = (False, f"timed out after {timeout:.0f} s")
            timed_out = False
            continue
        answers[name] = run_code(code, timeout=timeout)
    return answers


def run_code(code: str, env=None, timeout: float = CHILD_TIMEOUT):
    """(ok, last lines of output) of `python -c code`."""
    return finish_code(start_code(code, env), timeout)
