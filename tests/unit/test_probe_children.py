"""probe/children.py for real: child probes forked by the standard library's forkserver with torch preloaded (torch
imported once for all of them), each answering as a fresh child would (output, exit status, environment, directory,
a session of its own); a timeout and the watchdog kill them; where the forkserver cannot start one (no torch, a
torch whose import crashes it), the child is a fresh python.

A stand-in `torch` package (a file that logs each import) shows how many pythons imported it; the real CPU torch runs
the gloo ranks and the compile child through the forkserver in test_probe_cpu.py and test_probe_compile.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from imagebuild.smoke import probe as P
from imagebuild.smoke.probe import pack

PKG_PARENT = pack.PACKAGE_DIR.parent  # the directory holding probe/
PROBE = P.zipapp_path()


def _fake_torch(root: Path, body: str = "", distributed: str = "") -> Path:
    """A `torch` that appends its importer's pid to root/imports.log (and runs `body`); `distributed`: the source of
    its torch.distributed (default: none, so a gloo rank fails at once, saying so)."""
    pkg = root / "fake" / "torch"
    pkg.mkdir(parents=True)
    log = root / "imports.log"
    (pkg / "__init__.py").write_text(f"import os\nopen({str(log)!r}, 'a').write(f'{{os.getpid()}}\\n')\n{body}\n")
    if distributed:
        (pkg / "distributed.py").write_text(distributed)
    return root / "fake"


def _imports(root: Path) -> list[str]:
    log = root / "imports.log"
    return log.read_text().split() if log.exists() else []


def _driver(tmp_path: Path, fake: Path | None, code: str) -> dict:
    """Run `code` in a python that imports the probe package from its directory (and the stand-in torch, if any);
    it prints one JSON value."""
    path = [str(PKG_PARENT)] if fake is None else [str(fake), str(PKG_PARENT)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fresh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=60)


LAUNCH = """
import json, os
from probe.children import launch
from probe.common import finish_child, finish_process
handles = [launch(["--list-sections"]) for _ in range(3)] + [launch(["--dist-worker", "gloo"], merged=True)]
kinds = [type(h[0]).__name__ for h in handles]
docs = [finish_child(h, 60) for h in handles[:3]]
rc, rank, _ = finish_process(handles[3], 60)
os.makedirs("elsewhere")
os.chdir("elsewhere")  # the child's directory and environment are the caller's at launch, not the forkserver's
env = dict(os.environ, IB_TEST_PASSWORD="x")
say = launch(["--sections", "system", "--output", "doc.json"], env=env)
said = finish_child(say, 60)
bad = finish_process(launch(["--sections", "nope"]), 60)
print(json.dumps({"kinds": kinds, "docs": docs, "rank": rank, "rc": rc, "me": os.getpid(),
                  "secrets": [s["name"] for s in said["system"]["env"]["secret_names"]],
                  "output_here": os.path.exists("doc.json"), "bad": [bad[0], bad[2]]}))
"""


def test_children_fork_from_one_torch_import_and_answer_as_fresh_ones(tmp_path):
    res = _driver(tmp_path, _fake_torch(tmp_path), LAUNCH)
    fresh = json.loads(_fresh("--list-sections").stdout)
    assert res["kinds"] == ["Forked"] * 4
    assert res["docs"] == [fresh] * 3
    # the rank took its torch from the forkserver (the stand-in has no torch.distributed): it did not import torch
    assert res["rc"] == 0 and "IBPROBE-RESULT" in res["rank"] and "torch.distributed" in res["rank"]
    assert "IB_TEST_PASSWORD" in res["secrets"] and res["output_here"]
    assert res["bad"][0] == 2 and "unknown section" in res["bad"][1]  # argparse's exit status and message
    pids = _imports(tmp_path)
    assert len(pids) == 1 and int(pids[0]) != res["me"], pids  # ONE import: the forkserver's


def test_without_torch_children_are_fresh_pythons(tmp_path):
    res = _driver(tmp_path, None, LAUNCH)
    assert res["kinds"] == ["Popen"] * 4 and res["docs"] == [json.loads(_fresh("--list-sections").stdout)] * 3
    assert "IB_TEST_PASSWORD" in res["secrets"] and res["output_here"] and res["bad"][0] == 2


def test_a_torch_that_fails_to_import_fails_in_each_child_as_in_a_fresh_one(tmp_path):
    fake = _fake_torch(tmp_path, "raise ImportError('libtorch_cpu.so: cannot open shared object file')")
    res = _driver(tmp_path, fake, LAUNCH)
    assert res["docs"] == [json.loads(_fresh("--list-sections").stdout)] * 3
    assert "libtorch_cpu.so" in res["rank"] and "IBPROBE-RESULT" in res["rank"]  # the rank's own import says why
    assert len(_imports(tmp_path)) == 2  # the forkserver's try (an ImportError it passes over) and the rank's


def test_a_torch_whose_import_crashes_the_forkserver_leaves_children_to_fresh_pythons(tmp_path):
    fake = _fake_torch(tmp_path, "raise OSError('libcudnn.so.9: cannot open shared object file')")
    res = _driver(tmp_path, fake, LAUNCH)
    assert res["kinds"] == ["Popen"] * 4  # the forkserver died on the first: no second try
    assert res["docs"] == [json.loads(_fresh("--list-sections").stdout)] * 3
    assert "libcudnn.so.9" in res["rank"] and "IBPROBE-RESULT" in res["rank"]
    assert len(_imports(tmp_path)) == 2  # the forkserver's and the rank's


STUCK = """
import json, os, signal, subprocess, time
from probe.children import launch
from probe.common import stop_child
h = launch(["--dist-worker", "gloo"], merged=True)
pid = None
for _ in range(600):
    seen = open("rank.pid").read().split() if os.path.exists("rank.pid") else []
    if seen:
        pid = int(seen[0])
        break
    time.sleep(0.05)
try:
    h[0].wait(0.5)
    timed_out = False
except subprocess.TimeoutExpired:
    timed_out = True
own_session = os.getsid(pid) == pid
stop_child(h)
print(json.dumps({"timed_out": timed_out, "own_session": own_session, "rc": h[0].returncode,
                  "same": pid == h[0].pid}))
"""
SLEEPS = "import os, time\nopen('rank.pid', 'a').write(f'{os.getpid()}\\n')\ntime.sleep(120)\n"


def test_a_child_times_out_and_its_session_is_killed(tmp_path):
    res = _driver(tmp_path, _fake_torch(tmp_path, distributed=SLEEPS), STUCK)
    assert res == {"timed_out": True, "own_session": True, "rc": -9, "same": True}


def test_the_watchdog_kills_forked_children_and_the_probe_ends(tmp_path):
    """`probe.pyz --sections distributed --timeout 8` whose ranks hang: the probe prints its partial JSON at 8 s and
    exits 3, the ranks (forked by the forkserver) killed; the forkserver ends with the probe (nothing holds its
    output open). (3 s was too short for both ranks to start on two loaded cores.)"""
    fake = _fake_torch(tmp_path, "class version:\n    cuda = None", distributed=SLEEPS)  # a CPU torch: gloo
    t0 = time.time()
    tmp = tmp_path / "tmp"  # the probe's temporary files (the ranks' output): none are left
    tmp.mkdir()
    out = subprocess.run([sys.executable, str(PROBE), "--sections", "distributed", "--timeout", "8"],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(fake), TMPDIR=str(tmp)),
                         cwd=tmp_path, timeout=60)
    assert out.returncode == 3 and json.loads(out.stdout)["probe"]["timed_out"] is True, out.stderr[-2000:]
    assert time.time() - t0 < 30
    pids = [int(x) for x in (tmp_path / "rank.pid").read_text().split()]
    assert len(pids) == 2  # both ranks were running
    deadline = time.time() + 10
    while time.time() < deadline and any(_running(pid) for pid in pids):
        time.sleep(0.1)
    assert not [pid for pid in pids if _running(pid)]
    assert not list(tmp.iterdir())


def test_a_sections_wait_ends_after_the_deadline_so_the_watchdog_ends_the_probe():
    """At the deadline the watchdog ends the probe: a section's wait cut to the deadline runs WATCHDOG_FIRST past
    it (it ended at the same instant before, and which of the two printed the JSON was chance: exit 0 with
    `distributed: {}` or exit 3); a default shorter than what is left is the section's own."""
    from imagebuild.smoke.probe.common import WATCHDOG_FIRST, Probe

    p = Probe(["distributed"], deadline=time.time() + 30)
    assert 30 < p.remaining(120) <= 30 + WATCHDOG_FIRST and WATCHDOG_FIRST > 0
    assert p.remaining(10) == 10 and Probe(["distributed"]).remaining(120) == 120
    assert Probe(["distributed"], deadline=time.time() - 60).remaining(120) == 5.0  # the floor


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_compile_child_starts_ahead_through_the_forkserver(tmp_path):
    """`probe.pyz --sections compile` (a child started ahead): the child's checks come back (they fail on the
    stand-in), torch is imported twice in the whole run (the probe's and the forkserver's: the child's is the
    forkserver's), and the probe's output ends with the probe."""
    fake = _fake_torch(tmp_path)
    proc = subprocess.Popen([sys.executable, str(PROBE), "--sections", "compile", "--timeout", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(fake)),
                            cwd=tmp_path, text=True)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    names = {c["name"] for c in json.loads(out)["checks"]}
    assert {"compile.toolchain", "compile.cpu_function"} <= names
    pids = _imports(tmp_path)
    assert len(pids) == 2 and str(proc.pid) in pids, pids


ORPHANED_FORKSERVER = """
import multiprocessing, os, sys, threading, time
from probe import children
import hold

context = multiprocessing.get_context("forkserver")
# the forkserver imports the lifeline only after a slow start (python's start-up on a busy machine); this probe ends first
context.set_forkserver_preload(["slowstart", "probe.lifeline"])
children._start_forkserver()
threading.Thread(target=lambda: context.Process(target=hold.forever, args=(sys.argv[1],)).start(), daemon=True).start()
time.sleep(0.5)  # the request (and the child's data) is queued with the forkserver
os._exit(3)  # what the watchdog does
"""


def test_a_forkserver_whose_probe_ended_before_it_started_ends_too(tmp_path):
    """The probe's watchdog can end the probe while its forkserver is still starting (CI: the gloo ranks' request was
    queued already). That forkserver must end when it reaches the lifeline instead of forking the queued child, which
    would keep it and the probe's output open for ever (the reader of the probe's stdout hung)."""
    (tmp_path / "slowstart.py").write_text("import time\ntime.sleep(2)\n")
    marker = tmp_path / "child.pid"
    (tmp_path / "hold.py").write_text("import os, time\n\ndef forever(path):\n"
                                      "    open(path, 'w').write(str(os.getpid()))\n    time.sleep(3600)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(PKG_PARENT)]))
    t0 = time.time()
    try:
        out = subprocess.run([sys.executable, "-c", ORPHANED_FORKSERVER, str(marker)], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=60)
        assert out.returncode == 3, out.stderr[-2000:]
        assert time.time() - t0 < 30  # the output closed when the forkserver ended (never, before)
        assert not marker.exists(), "the forkserver forked the queued child after its probe had ended"
        assert not _running_in(tmp_path)
    finally:
        for pid in _running_in(tmp_path):  # (what a failure left: the forkserver and its child)
            os.kill(pid, 9)


def _running_in(root: Path) -> list[int]:
    """Processes still running whose working directory is under `root`."""
    left = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and _running(int(proc.name)) and os.readlink(proc / "cwd").startswith(str(root)):
                left.append(int(proc.name))
        except OSError:
            continue
    return left


def test_the_lifeline_arms_a_forkserver_only_and_ends_one_whose_probe_is_gone():
    """probe.lifeline imported where PARENT_VARIABLE is set: in a python that is no forkserver, nothing happens; in a
    forkserver (`-c` with multiprocessing.forkserver loaded) whose parent the variable names, it is armed (its pid);
    in a forkserver whose parent is not the one named (that probe is gone), it ends at once, printing nothing."""
    code = "import sys{}\nfrom probe import lifeline\nprint(lifeline.SERVER_PID)"

    def run(extra: str, parent: int) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONPATH=str(PKG_PARENT), IMAGEBUILD_PROBE_PARENT=str(parent))
        return subprocess.run([sys.executable, "-c", code.format(extra)], capture_output=True, text=True, env=env,
                              timeout=60)

    plain = run("", os.getpid())
    assert plain.returncode == 0 and plain.stdout.strip() == "None", plain.stderr[-2000:]
    armed = run("; import multiprocessing.forkserver", os.getpid())
    assert armed.returncode == 0 and armed.stdout.strip().isdigit(), armed.stderr[-2000:]
    ended = subprocess.Popen(["true"])
    ended.wait()
    orphan = run("; import multiprocessing.forkserver", ended.pid)  # (a probe that has ended)
    assert orphan.returncode == 0 and orphan.stdout == "", orphan.stdout
