"""probe/zygote.py for real: child probes forked from one python that imported torch once, each answering as a fresh
child would (output, exit status, environment, directory); a crash, a kill and a timeout seen as with a fresh
child; and where the zygote cannot serve (torch does not import, it died), the child runs as a fresh python.

A stand-in `torch` package (a file that logs each import) shows how many pythons imported it; the real CPU torch runs
the gloo ranks and the compile child through the zygote in test_probe_cpu.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from imagebuild.smoke import probe as P
from imagebuild.smoke.probe import zygote

PKG_PARENT = Path(P.__file__).resolve().parent.parent  # the directory holding probe/
PROBE = P.zipapp_path()


def _fake_torch(root: Path, body: str = "") -> Path:
    """A `torch` that appends its importer's pid to root/imports.log (and runs `body`)."""
    pkg = root / "fake" / "torch"
    pkg.mkdir(parents=True)
    log = root / "imports.log"
    (pkg / "__init__.py").write_text(f"import os\nopen({str(log)!r}, 'a').write(f'{{os.getpid()}}\\n')\n{body}\n")
    return root / "fake"


def _driver(tmp_path: Path, fake: Path, code: str) -> dict:
    """Run `code` in a python that has the probe package and the stand-in torch; it prints one JSON value."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), str(PKG_PARENT)]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


LAUNCH = """
import json, os
from probe.common import finish_child
from probe.zygote import launch
handles = [launch(["--list-sections"]) for _ in range(3)] + [launch(["--dist-worker", "gloo"], merged=True)]
kinds = [type(h[0]).__name__ for h in handles]
fallback = [getattr(h[0], "fallback", None) is not None for h in handles]
docs = [finish_child(h, 60) for h in handles[:3]]
rank = handles[3]
rank[0].wait(60)
rank[1].seek(0)
print(json.dumps({"kinds": kinds, "fallback": fallback, "docs": docs, "rank": rank[1].read().decode(),
                  "rc": rank[0].returncode, "me": os.getpid()}))
"""


def test_children_fork_from_one_torch_import_and_answer_as_fresh_ones(tmp_path):
    fake = _fake_torch(tmp_path)
    res = _driver(tmp_path, fake, LAUNCH)
    fresh = json.loads(subprocess.run([sys.executable, str(PROBE), "--list-sections"], capture_output=True,
                                      text=True, timeout=60).stdout)
    assert res["kinds"] == ["ZygoteChild"] * 4 and res["fallback"] == [False] * 4
    assert res["docs"] == [fresh] * 3
    # the rank imported `torch.distributed` from the zygote's torch (the stand-in has none): it did not import torch
    assert res["rc"] == 0 and "IBPROBE-RESULT" in res["rank"] and "torch.distributed" in res["rank"]
    pids = (tmp_path / "imports.log").read_text().split()
    assert len(pids) == 1 and int(pids[0]) != res["me"], pids  # ONE import: the zygote's


def test_a_zygote_whose_torch_does_not_import_leaves_children_to_fresh_pythons(tmp_path):
    fake = _fake_torch(tmp_path, "raise ImportError('libtorch_cpu.so: cannot open shared object file')")
    res = _driver(tmp_path, fake, LAUNCH)
    fresh = json.loads(subprocess.run([sys.executable, str(PROBE), "--list-sections"], capture_output=True,
                                      text=True, timeout=60).stdout)
    assert res["docs"] == [fresh] * 3
    # the rank ran as a fresh python: it imported torch itself, and says why it failed
    assert "libtorch_cpu.so" in res["rank"] and "IBPROBE-RESULT" in res["rank"]
    assert len((tmp_path / "imports.log").read_text().split()) == 2  # the zygote's try and the fresh rank's


SERVE = """
import os, signal, sys, time
from probe.zygote_serve import serve
def run(args):
    if args[0] == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if args[0] == "sleep":
        time.sleep(float(args[1]))
    if args[0] == "say":
        print("out", os.environ.get("IB_X"), os.getcwd(), flush=True)
        print("err", os.getsid(0) == os.getpid(), file=sys.stderr, flush=True)
        return 3
    if args[0] == "exit":
        sys.exit("a message")
    return 0
sys.exit(serve(run))
"""


@pytest.fixture
def own_zygote(tmp_path):
    """A Zygote whose process serves SERVE's run(args) (the stand-in torch on its path); stopped after the test."""
    fake = _fake_torch(tmp_path)
    z = zygote.Zygote()
    z.dir = tempfile.mkdtemp(dir=tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), str(PKG_PARENT)]))
    z.proc = subprocess.Popen([sys.executable, "-c", SERVE], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              env=env, start_new_session=True)
    yield z
    if z.proc is not None and z.proc.poll() is None:
        os.killpg(z.proc.pid, signal.SIGKILL)
        z.proc.wait()


def _fork(z, args, tmp_path, env=None):
    out = tempfile.NamedTemporaryFile(dir=tmp_path)
    err = tempfile.NamedTemporaryFile(dir=tmp_path)
    child = z.fork(args, dict(os.environ, **(env or {})), str(tmp_path), out, err)
    assert child is not None
    return child, out, err


def _read(fh) -> str:
    fh.seek(0)
    return fh.read().decode()


def test_output_status_environment_directory_and_session_come_back(own_zygote, tmp_path):
    child, out, err = _fork(own_zygote, ["say"], tmp_path, {"IB_X": "42"})
    assert child.wait(60) == 3
    assert _read(out).split() == ["out", "42", str(tmp_path)]
    assert _read(err).split() == ["err", "True"]  # a session of its own: killpg(pid) ends it and its compilers
    child, _, err = _fork(own_zygote, ["exit"], tmp_path)
    assert child.wait(60) == 1 and "a message" in _read(err)


def test_a_crash_is_its_signal_and_ends_only_that_child(own_zygote, tmp_path):
    crash, _, _ = _fork(own_zygote, ["crash"], tmp_path)
    ok, _, _ = _fork(own_zygote, ["ok"], tmp_path)
    assert crash.wait(60) == -signal.SIGSEGV
    assert ok.wait(60) == 0 and own_zygote.proc.poll() is None


def test_a_timeout_raises_and_a_kill_ends_the_child(own_zygote, tmp_path):
    child, _, _ = _fork(own_zygote, ["sleep", "60"], tmp_path)
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.5)
    assert child.poll() is None
    child.kill()
    assert child.wait(10) == -signal.SIGKILL


def test_a_zygote_that_dies_loses_no_child(own_zygote, tmp_path):
    running, _, err = _fork(own_zygote, ["sleep", "1"], tmp_path)
    deadline = time.time() + 30
    while running._pid() is None and time.time() < deadline:
        time.sleep(0.05)
    os.kill(own_zygote.proc.pid, signal.SIGKILL)
    own_zygote.proc.wait()
    # forked before the zygote died: it runs to its end, its status is lost and said so
    assert running.wait(30) == zygote.LOST and "lost with the zygote" in _read(err)
    assert own_zygote.fork(["ok"], dict(os.environ), str(tmp_path), err, err) is None  # no more requests


def test_a_request_the_zygote_never_forked_runs_as_a_fresh_python(tmp_path):
    z = zygote.Zygote()
    z.dir = tempfile.mkdtemp(dir=tmp_path)
    # a zygote that reads nothing and ends: the request is taken, never forked
    z.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, start_new_session=True)
    out = tempfile.NamedTemporaryFile(dir=tmp_path)
    env = dict(os.environ, PYTHONPATH=str(PKG_PARENT))
    child = z.fork(["--list-sections"], env, str(tmp_path), out, out)
    assert child is not None and child.wait(60) == 0 and child.fallback is not None
    assert json.loads(_read(out)) == json.loads(subprocess.run(
        [sys.executable, str(PROBE), "--list-sections"], capture_output=True, text=True, timeout=60).stdout)


def test_the_main_probe_forks_the_zygote_after_its_own_import(tmp_path):
    """`probe.pyz --sections compile` (a child started ahead): the probe imports torch before any section and forks
    the zygote from itself, so torch is imported ONCE in the whole run (the spawned zygote made it twice), the child's
    checks come back and the probe's output ends with the probe (the zygote holds no copy of it)."""
    fake = _fake_torch(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(fake))
    proc = subprocess.Popen([sys.executable, str(PROBE), "--sections", "compile", "--timeout", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    doc = json.loads(out)
    names = {c["name"] for c in doc["checks"]}
    assert {"compile.toolchain", "compile.cpu_function"} <= names, doc  # the child's (it fails on the stand-in)
    assert (tmp_path / "imports.log").read_text().split() == [str(proc.pid)]
