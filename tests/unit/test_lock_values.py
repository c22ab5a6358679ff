"""Issue 25: a lock's values are checked as what they claim to be before anything uses them, and what reaches a shell
is quoted. The lock's content_sha256 is a plain hash anyone editing the file recomputes (here: `dump` re-seals), so
the seal says nothing about the values: `lock --check`, `render`, `bake` and `build` each refuse a hostile one with
one `error:` line naming the file, line, key and value, exit 2."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from _lock_support import INPUTS, cpu_with_lock
from hypothesis import given, settings
from hypothesis import strategies as st

from imagebuild import values
from imagebuild.lock import LockError, dump, lock_path, parse, requirements_text
from imagebuild.lock.model import Lock
from imagebuild.plan import make_plan

SRC = str(Path(__file__).resolve().parents[2] / "src")
RUNTIME = "2.13.0-cpu-py3.11-debian12-runtime"


@pytest.fixture(scope="module")
def cpu(tmp_path_factory):
    return cpu_with_lock(tmp_path_factory.mktemp("cpu"))


def _with_apt(lock: Lock, image: str, package: str, version: str) -> Lock:
    entry = lock.images[image]
    return replace(lock, images={**lock.images, image: replace(entry, apt={**entry.apt, package: version})})


def _with_pip_version(lock: Lock, image: str, name: str, version: str) -> Lock:
    entry = lock.images[image]
    pins = tuple(replace(p, version=version) if p.name == name else p for p in entry.pip)
    return replace(lock, images={**lock.images, image: replace(entry, pip=pins)})


def _resealed(matrix: Path, lock: Lock, tmp_path: Path) -> Path:
    """The matrix and a hand-edited lock, its content_sha256 recomputed (what anyone editing it can do)."""
    target = tmp_path / matrix.name
    target.write_text(matrix.read_text())
    lock_path(target).write_text(dump(lock))
    return target


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagebuild", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": SRC, "DOCKER_HOST": "unix:///nonexistent.sock"})


HOSTILE_APT = "1.0; touch /tmp/x #"
HOSTILE_PIP = "2.13.0\n--index-url https://elsewhere/simple"


@pytest.mark.parametrize(("edit", "key", "shown"), [
    (lambda lock: _with_apt(lock, RUNTIME, "gcc", HOSTILE_APT), f"images.{RUNTIME}.apt.gcc",
     repr(HOSTILE_APT)),
    (lambda lock: _with_pip_version(lock, RUNTIME, "filelock", HOSTILE_PIP), f"images.{RUNTIME}.pip[",
     repr(HOSTILE_PIP)),
])
@pytest.mark.parametrize("command", ["lock-check", "render", "bake", "build"])
def test_a_hostile_lock_value_is_refused_by_every_command(cpu, tmp_path, edit, key, shown, command):
    matrix, _, lock = cpu
    target = _resealed(matrix, edit(lock), tmp_path)
    args = {"lock-check": ["lock", "--check", "-m", str(target), "--torch-index-url", "none"],
            "render": ["render", "-m", str(target), "--torch-index-url", "none", "--out", str(tmp_path / "out")],
            "bake": ["bake", "-m", str(target), "--torch-index-url", "none", "-o", str(tmp_path / "bake.json")],
            "build": ["build", "-m", str(target), "--torch-index-url", "none", "--locked"]}[command]
    res = _cli(*args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    line = errors[0]
    assert f"{lock_path(target)}:" in line and key in line and shown in line
    assert line.split(f"{lock_path(target)}:")[1].split(":")[0].isdigit()  # the line it is on
    assert not (tmp_path / "out").exists() and not (tmp_path / "bake.json").exists()


@pytest.mark.parametrize(("field", "bad", "message"), [
    ("sha256", "ABC", "is not a sha256"),
    ("file", "x.whl\n--index-url http://e/", "is not a wheel file name"),
    ("name", "torch; rm -rf /", "is not a Python project name"),
    ("version", "1.0 ; python_version<'4'", "is not a PEP 440 version"),
])
def test_every_pip_field_is_checked(cpu, field, bad, message):
    _, _, lock = cpu
    entry = lock.images[RUNTIME]
    pins = (replace(entry.pip[0], **{field: bad}), *entry.pip[1:])
    text = dump(replace(lock, images={**lock.images, RUNTIME: replace(entry, pip=pins)}))
    with pytest.raises(LockError, match=f"x.lock:[0-9]+: .*{message}"):
        parse(text, "x.lock")


def test_base_entry_values_are_checked(cpu):
    _, _, lock = cpu
    base_id = "2.13.0-cpu-py3.11-debian12-base"
    entry = lock.images[base_id]
    assert entry.base is not None
    for base, message in ((replace(entry.base, packages={"tini": "$(id)"}), "is not a Debian version"),
                          (replace(entry.base, packages={"Tini;": "1.0"}), "is not a Debian package name"),
                          (replace(entry.base, mirror_state={"u s": "yesterday"}), "is not an RFC 3339 date"),
                          (replace(entry.base, kind="registry", ref="r/x:1", digest="sha256:xyz"), "is not a digest")):
        text = dump(replace(lock, images={**lock.images, base_id: replace(entry, base=base)}))
        with pytest.raises(LockError, match=message):
            parse(text, "x.lock")


def test_a_good_lock_still_reads(cpu):
    matrix, _, lock = cpu
    assert parse(lock_path(matrix).read_text(), "x.lock").images == lock.images


@pytest.mark.parametrize(("check", "good", "bad"), [
    (values.debian_version, ["1.0-1", "2:1.2.3~rc1+deb12u1-0ubuntu1", "20250419~deb12u2", "0.19.0-1+b3"],
     ["", "1.0; touch /tmp/x #", "v1.0", "1.0 ", "1.0\n", "1:", "a" * 300]),
    (values.pep440_version, ["2.13.0", "2.13.0+cpu", "1!2.0.post1.dev3", "4.6.6"],
     ["", "2.13.0\n--index-url x", "1.0 ", "1.0,<2", "latest"]),
    (values.sha256_hex, ["a" * 64], ["A" * 64, "a" * 63, "a" * 64 + "\n"]),
    (values.digest, ["sha256:" + "0" * 64], ["sha256:" + "0" * 63, "0" * 64, "sha512:" + "0" * 64]),
    (values.rfc3339, ["2026-11-29T00:00:00Z", "2026-11-29T00:00:00.5+01:00"],
     ["2026-11-29", "2026-11-29T00:00:00Z\n", "0001-01-01T00:00:00Z", "tomorrow"]),
])
def test_value_checks_on_good_and_bad_values(check, good, bad):
    for value in good:
        assert check(value) == value
    for value in bad:
        with pytest.raises(values.ValueProblem):
            check(value)


def test_rendered_apt_pins_are_one_shell_word_each(cpu, tmp_path):
    matrix, _, lock = cpu
    target = _resealed(matrix, _with_apt(lock, RUNTIME, "gcc", "1:2.0~rc1-1"), tmp_path)
    runtime = next(i for i in make_plan(target, INPUTS, render_dir=tmp_path / "r").images if i.id == RUNTIME)
    assert "'gcc=1:2.0~rc1-1'" in runtime.dockerfile


# -- properties -------------------------------------------------------------------------------------------------------
_TEXT = st.text(alphabet=st.sampled_from(list("09aZ.+~:-_ ;#$`'\"\\\n\t|&()<>*!=@/%,")), min_size=1, max_size=20)


def _apt_words(dockerfile: str) -> list[str]:
    """The words of the apt-get install line's package list, as the RUN's shell reads them."""
    block = dockerfile.split("apt-get install -y --no-install-recommends \\\n", 1)[1].split("; \\\n", 1)[0]
    return shlex.split(block.replace("\\\n", ""))


@settings(max_examples=60, deadline=None)
@given(version=_TEXT)
def test_hostile_apt_versions_are_refused_or_one_word(cpu, tmp_path_factory, version):
    matrix, _, lock = cpu
    text = dump(_with_apt(lock, RUNTIME, "gcc", version))
    try:
        parsed = parse(text, "x.lock")
    except LockError as exc:
        assert "apt.gcc" in str(exc) and "\n" not in str(exc)
        return
    assert values.debian_version(version) == version  # what passed is a Debian version
    tmp = tmp_path_factory.mktemp("r")
    target = _resealed(matrix, parsed, tmp)
    runtime = next(i for i in make_plan(target, INPUTS, render_dir=tmp / "r").images if i.id == RUNTIME)
    assert f"gcc={version}" in _apt_words(runtime.dockerfile)


@settings(max_examples=100, deadline=None)
@given(version=_TEXT)
def test_hostile_pip_versions_are_refused_or_one_requirement_line(cpu, version):
    _, _, lock = cpu
    text = dump(_with_pip_version(lock, RUNTIME, "torch", version))
    try:
        parsed = parse(text, "x.lock")
    except LockError as exc:
        assert "pip[" in str(exc) and "\n" not in str(exc)
        return
    requirements = requirements_text(parsed.images[RUNTIME])
    pins = [ln for ln in requirements.splitlines() if ln and not ln.startswith(("#", "    --hash"))]
    assert len(pins) == len(parsed.images[RUNTIME].pip)  # no line added
    assert f"torch=={version} \\" in pins
    assert not any("--index-url" in ln or "--extra-index-url" in ln for ln in requirements.splitlines())


def test_a_mirror_answering_a_hostile_version_writes_no_lock(cpu, tmp_path, monkeypatch):
    from _lock_support import FakeApt, fake_locker
    from click.testing import CliRunner

    from imagebuild.commands.lock import command as lock_cmd

    class HostileMirror(FakeApt):
        def versions(self, lines, packages, what=""):
            return {p: HOSTILE_APT for p in sorted(packages)}

    matrix, _, _ = cpu
    target = tmp_path / "cpu.yaml"
    target.write_text(matrix.read_text())
    locker = fake_locker()
    locker.apt = HostileMirror()
    monkeypatch.setattr("imagebuild.pipeline.locking.make_locker", lambda inputs, echo=None: locker)
    r = CliRunner().invoke(lock_cmd, ["-m", str(target), "--torch-index-url", "none"], standalone_mode=False)
    assert r.return_value == 1, r.output
    assert "nothing written" in r.output and repr(HOSTILE_APT) in r.output
    assert not lock_path(target).exists()
    locker.apt = FakeApt()  # the same run with an honest mirror writes it
    r = CliRunner().invoke(lock_cmd, ["-m", str(target), "--torch-index-url", "none"], standalone_mode=False)
    assert r.return_value == 0 and lock_path(target).exists()
