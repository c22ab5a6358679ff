"""The compile child's vector-ISA head start (probe/vec_isa.py): each ISA's dry compile in a thread of its own, the
lookup once after them, Inductor's call taking its answer; a failure as before; and, with a real torch, no import
in those threads (imports beside dynamo's miss modules that are there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import types

import pytest

from imagebuild.smoke.probe import pack, vec_isa

SMOKE_DIR = pack.PACKAGE_DIR.parent  # holds probe/: imported as the zipapp imports it


def _fake_inductor(monkeypatch, lookup):
    """A stand-in torch._inductor whose cpu_vec_isa.valid_vec_isa_list is `lookup` (lru-cached, as Inductor's)."""
    import functools

    mods = {name: types.ModuleType(name) for name in
            ("torch", "torch._inductor", "torch._inductor.codecache", "torch._inductor.cpp_builder",
             "torch._inductor.cpu_vec_isa", "torch.utils", "torch.utils.cpp_extension")}
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
        parent, _, leaf = name.rpartition(".")
        if parent:
            setattr(mods[parent], leaf, mod)
    isa = mods["torch._inductor.cpu_vec_isa"]
    isa.valid_vec_isa_list = functools.lru_cache(None)(lookup)  # type: ignore[attr-defined]
    return isa


def test_the_vec_isa_lookup_runs_once_in_a_thread_and_inductor_takes_its_answer(monkeypatch):
    ran: list[str] = []

    def lookup():
        ran.append(threading.current_thread().name)
        time.sleep(0.2)  # Inductor asks while the thread is still at it: it waits, it does not look up again
        return ["avx512", "avx2"]

    isa = _fake_inductor(monkeypatch, lookup)
    thread = vec_isa.warm()
    assert thread is not None
    assert isa.valid_vec_isa_list() == ["avx512", "avx2"]  # as pick_vec_isa calls it, by its module's name
    assert isa.valid_vec_isa_list() == ["avx512", "avx2"]
    assert ran == ["vec-isa"] and not thread.is_alive()


class _FakeIsa:
    """An Inductor VecISA: str() is its CPU flags, bool() its dry compile (here: a barrier all checks must reach)."""

    def __init__(self, flags, barrier, seen):
        self.flags, self.barrier, self.seen = flags, barrier, seen

    def __str__(self):
        return self.flags

    def __bool__(self):
        self.seen.append((self.flags, threading.current_thread().name))
        self.barrier.wait(timeout=10)  # one after another, the first would wait here alone and time out
        return True


def test_each_reported_isa_is_dry_compiled_in_a_thread_of_its_own_side_by_side(monkeypatch):
    seen: list[tuple[str, str]] = []
    barrier = threading.Barrier(2)
    isas = [_FakeIsa(flags, barrier, seen) for flags in ("amx_tile", "avx512 avx512_vnni", "avx512", "asimd")]

    def lookup():
        seen.append(("lookup", threading.current_thread().name))
        return [isa for isa in isas if isa.flags in ("avx512 avx512_vnni", "avx512")]  # Inductor's answer

    isa = _fake_inductor(monkeypatch, lookup)
    isa.supported_vec_isa_list = isas  # type: ignore[attr-defined]
    isa.x86_isa_checker = lambda: ["avx2", "avx512", "avx512_vnni"]  # type: ignore[attr-defined]
    thread = vec_isa.warm()
    assert [str(i) for i in isa.valid_vec_isa_list()] == ["avx512 avx512_vnni", "avx512"]
    assert thread is not None and not thread.is_alive() and not barrier.broken
    checks = sorted(seen[:2])
    assert checks == [("avx512", "vec-isa avx512"), ("avx512 avx512_vnni", "vec-isa avx512 avx512_vnni")]
    assert seen[2:] == [("lookup", "vec-isa")]  # after both checks, once: Inductor's call took its answer


def test_the_real_vec_isa_checks_import_nothing_beside_the_main_thread(torch_python, tmp_path):
    """With a real torch: the ISA checks and the lookup, in their threads, import no module (an import there runs
    beside dynamo's in the compile child: setuptools' finder shuffle makes the other thread's import miss a module
    that is there). Each import is seen by an audit hook with its thread's name."""
    code = f"""
import json, sys, threading
sys.path.insert(0, {str(SMOKE_DIR)!r})
seen = []
sys.addaudithook(lambda event, args: event == "import" and seen.append((threading.current_thread().name, args[0])))
import torch
from probe import vec_isa
thread = vec_isa.warm()
thread.join(timeout=300)
from torch._inductor import cpu_vec_isa
print(json.dumps({{"alive": thread.is_alive(), "isas": [str(i) for i in cpu_vec_isa.valid_vec_isa_list()],
                   "in_threads": [(t, m) for t, m in seen if t.startswith("vec-isa")]}}))
"""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([torch_python, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout.splitlines()[-1])
    assert not doc["alive"] and doc["isas"], doc  # the checks ran and found this host's ISAs
    assert doc["in_threads"] == [], doc["in_threads"][:20]


def test_isa_candidates_are_none_where_inductor_does_not_say(monkeypatch):
    isa = _fake_inductor(monkeypatch, lambda: [])
    assert vec_isa.isa_candidates(isa) == []  # no x86_isa_checker / supported_vec_isa_list: one lookup


def test_a_vec_isa_lookup_that_fails_fails_inductors_call_as_before(monkeypatch):
    calls: list[int] = []

    def lookup():
        calls.append(1)
        raise RuntimeError("g++: fatal error: no input files")

    isa = _fake_inductor(monkeypatch, lookup)
    vec_isa.warm()
    with pytest.raises(RuntimeError, match="no input files"):
        isa.valid_vec_isa_list()
    assert len(calls) == 2  # the thread's try, then Inductor's own: a failure is not cached


def test_a_torch_without_the_vec_isa_module_is_left_as_it_is(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setitem(sys.modules, "torch._inductor", None)  # import fails, as on torch < 2.5
    assert vec_isa.warm() is None
