"""Locks for unit tests: pip and apt stand-ins (no index, no mirror) and images/cpu.yaml copied next to a lock made
with them (test_lock.py, test_lock_values.py)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from imagebuild.inputs import BuildInputs
from imagebuild.lock import dump, lock_path
from imagebuild.lock.apt import AptIndex
from imagebuild.lock.generate import Locker
from imagebuild.lock.model import Lock, PipPin
from imagebuild.lock.pip import PipResolver
from imagebuild.models import Plan
from imagebuild.plan import make_plan

ROOT = Path(__file__).resolve().parents[2]
INPUTS = BuildInputs(torch_index_url="none")


def sha_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def fake_pin(name: str, version: str) -> PipPin:
    return PipPin(name, version, sha_of(name + version), f"{name}-{version}-py3-none-any.whl")


class FakeResolver(PipResolver):
    """pip stand-in: each requirement resolves to itself plus one dependency, honouring the parent's constraints."""

    def _resolve(self, requirements, python, platforms, source, constraints, what):
        self.calls += 1
        self.seen = getattr(self, "seen", []) + [(tuple(requirements), tuple(constraints), source)]
        pinned = dict(c.split("==") for c in constraints)
        out = {}
        for req in requirements:
            name, _, version = req.partition("==")
            out[name] = fake_pin(name, version or "1.0")
            out["dep-of-" + name] = fake_pin("dep-of-" + name, "2.0")
        out["filelock"] = fake_pin("filelock", pinned.get("filelock", "3.0"))  # shared by every flavor
        return sorted(out.values(), key=lambda p: p.name)


class FakeApt(AptIndex):
    def versions(self, lines, packages, what=""):
        return {p: "1.0-1" for p in sorted(packages)}

    def mirror_state(self, lines):
        return {f"{ln.split()[1]} {ln.split()[2]}": "2026-11-29T00:00:00Z" for ln in lines}


def fake_locker() -> Locker:
    return Locker(sources_for=lambda v: ([f"deb {v.os.mirror} {v.os.codename} main"], ("python3", "tini")),
                  pip=FakeResolver(), apt=FakeApt())


def cpu_with_lock(tmp_path: Path) -> tuple[Path, Plan, Lock]:
    """images/cpu.yaml copied into `tmp_path` next to a lock of our own (made with the fake resolver)."""
    matrix = tmp_path / "cpu.yaml"
    shutil.copy(ROOT / "images" / "cpu.yaml", matrix)
    plan = make_plan(matrix, INPUTS, use_lock=False, render_dir=tmp_path / "r")
    lock = fake_locker().lock(plan, "cpu.yaml", made_with="--torch-index-url none")
    lock_path(matrix).write_text(dump(lock))
    return matrix, plan, lock
