"""The lock: file format, fit to the matrix (stale / mismatch messages), inputs hash, pip report and apt parsing."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from _lock_support import INPUTS, cpu_with_lock, fake_pin, sha_of

from imagebuild.builder.backends.classic.stream import BuildStream
from imagebuild.errors import EXIT_BAD_INPUT
from imagebuild.lock import LockError, dump, load, lock_path, parse, problems, requirements_text
from imagebuild.lock.apt import AptIndex, compare_versions, parse_packages
from imagebuild.lock.generate import Locker
from imagebuild.lock.model import BaseLock, Lock, LockedImage, PipPin, entry_digest
from imagebuild.lock.pip import PipResolver, pins_from_report, platform_tags
from imagebuild.plan import make_plan


@pytest.fixture()
def cpu(tmp_path):
    """images/cpu.yaml copied next to a lock of our own (made with the fake resolver)."""
    return cpu_with_lock(tmp_path)


def test_dump_parse_round_trip_is_stable_and_sorted(cpu):
    matrix, _, lock = cpu
    text = lock_path(matrix).read_text()
    again = parse(text, "x.lock")
    assert dump(again) == text  # same bytes: a regenerated lock diffs only where upstream moved
    assert text.startswith("# imagebuild lock for cpu.yaml") and "Made with: --torch-index-url none" in text
    ids = [ln.strip().strip('":') for ln in text.splitlines() if ln.startswith('  "')]
    assert ids == sorted(ids) and len(ids) == 3
    runtime = again.images["2.13.0-cpu-py3.11-debian12-runtime"]
    assert [p.name for p in runtime.pip] == sorted(p.name for p in runtime.pip)
    assert runtime.pin("torch").version == "2.13.0" and runtime.apt["gcc"] == "1.0-1"
    base = again.images["2.13.0-cpu-py3.11-debian12-base"].base
    assert base.kind == "bootstrap" and base.suite == "bookworm" and base.packages == {"python3": "1.0-1",
                                                                                       "tini": "1.0-1"}


def test_each_image_locks_only_what_its_stage_adds_on_top_of_its_parent(cpu):
    _, _, lock = cpu
    runtime = lock.images["2.13.0-cpu-py3.11-debian12-runtime"]
    dev = lock.images["2.13.0-cpu-py3.11-debian12-dev"]
    assert runtime.pin("filelock") is not None
    assert dev.pin("filelock") is None  # the runtime pin is inherited, not repeated
    assert dev.pin("jupyterlab").version == "4.6.6"
    assert lock.images["2.13.0-cpu-py3.11-debian12-base"].pip == ()


def test_a_fitting_lock_is_used_and_its_content_changes_the_inputs_hash(cpu, tmp_path):
    matrix, unlocked, lock = cpu
    locked = make_plan(matrix, INPUTS, render_dir=tmp_path / "r")
    assert locked.lock_file == str(lock_path(matrix))
    by_id = {i.id: i for i in locked.images}
    runtime = by_id["2.13.0-cpu-py3.11-debian12-runtime"]
    # the lock is the final environment the resolve stage splits into tiers; each tier installs its part by hash
    assert runtime.locked and "--lock /tmp/imagebuild-lock.txt" in runtime.dockerfile
    assert "--require-hashes -r /opt/stage/opt/venv/.imagebuild-layers/torch.txt" in runtime.dockerfile
    assert runtime.context_files["lock/requirements.txt"].decode() == requirements_text(lock.images[runtime.id])
    assert "gcc=1.0-1" in runtime.dockerfile
    before = {i.id: i.inputs_hash for i in unlocked.images}
    assert all(before[i.id] != i.inputs_hash for i in locked.images)
    # a new header, a new file name or mtime: same hashes; one new file hash: that image and its children only
    path = lock_path(matrix)
    path.write_text("# regenerated on another day\n" + path.read_text())
    assert {i.id: i.inputs_hash for i in make_plan(matrix, INPUTS, render_dir=tmp_path / "r").images} == \
        {i.id: i.inputs_hash for i in locked.images}
    numpy = lock.images[runtime.id].pin("numpy")
    path.write_text(dump(parse(path.read_text().replace(numpy.sha256, "f" * 64))))  # re-sealed: a real new lock
    changed = {i.id: i.inputs_hash for i in make_plan(matrix, INPUTS, render_dir=tmp_path / "r").images}
    assert changed["2.13.0-cpu-py3.11-debian12-base"] == by_id["2.13.0-cpu-py3.11-debian12-base"].inputs_hash
    assert changed[runtime.id] != runtime.inputs_hash
    assert changed["2.13.0-cpu-py3.11-debian12-dev"] != by_id["2.13.0-cpu-py3.11-debian12-dev"].inputs_hash


def test_entry_digest_is_content_only():
    a = LockedImage("x", "debian12", "3.11", "manylinux_2_36_x86_64", ("numpy",), (fake_pin("numpy", "2.0"),))
    assert entry_digest(a) == entry_digest(replace(a))
    assert entry_digest(a) != entry_digest(replace(a, pip=(fake_pin("numpy", "2.1"),)))
    assert entry_digest(a) != entry_digest(replace(a, apt={"gcc": "12"}))


def test_a_lock_for_another_torch_is_refused_naming_image_and_entry(cpu, tmp_path):
    matrix, _, lock = cpu
    path = lock_path(matrix)
    path.write_text(dump(parse(path.read_text().replace('name: "torch", version: "2.13.0"',
                                                        'name: "torch", version: "2.12.0"'))))
    with pytest.raises(LockError) as err:
        make_plan(matrix, INPUTS, render_dir=tmp_path / "r")
    assert err.value.exit_code == EXIT_BAD_INPUT
    assert str(err.value).startswith(f"{path}: image 2.13.0-cpu-py3.11-debian12-runtime: torch==2.12.0 does not "
                                     "match the matrix's torch 2.13.0; `imagebuild lock --matrix")


def test_stale_entries_are_each_named(cpu, tmp_path):
    matrix, plan, lock = cpu
    text = matrix.read_text().replace("runtime: [numpy]", "runtime: [numpy, six]")
    text = text.replace("python: \"3.11\"", "python: \"3.11\"\n  apt_packages: {dev: [zsh]}")
    matrix.write_text(text)
    changed = make_plan(matrix, INPUTS, use_lock=False, render_dir=tmp_path / "r")
    found = problems(load(lock_path(matrix)), changed.images)
    rt, dev = "2.13.0-cpu-py3.11-debian12-runtime", "2.13.0-cpu-py3.11-debian12-dev"
    assert f"{lock_path(matrix)}: image {rt}: six is not in the lock" in found
    assert f"{lock_path(matrix)}: image {dev}: apt package zsh is not in the lock" in found
    # an image the matrix no longer builds, one it builds newly, a requirement it dropped
    gone = Lock("cpu.yaml", {**lock.images, "old-runtime": lock.images[rt]}, path="cpu.lock")
    gone.images[rt] = replace(lock.images[rt], pip_requires=("numpy", "scipy", "torch==2.13.0"))
    del gone.images[dev]
    found = problems(gone, plan.images)
    assert "cpu.lock: image old-runtime: in the lock, but the matrix no longer builds it" in found
    assert any(f.startswith(f"cpu.lock: image {dev}: not in the lock") for f in found)
    assert f"cpu.lock: image {rt}: the lock was made for pip requirement scipy, which the matrix no longer asks " \
           "for" in found
    assert problems(lock, plan.images) == []


def test_bootstrap_base_change_is_stale(cpu):
    _, plan, lock = cpu
    base = plan.images[0]
    moved = replace(base, variant=replace(base.variant, base=replace(base.variant.base, snapshot="20261101T000000Z")))
    found = [f for f in problems(lock, [moved]) if f"image {base.id}:" in f]
    assert found == [f"{lock.path}: image {base.id}: bootstrap snapshot None in the lock, the matrix's is "
                     "20261101T000000Z"]


def test_lock_check_and_build_locked_cli(cpu, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from imagebuild.commands.build import command as build
    from imagebuild.commands.lock import command as lock_cmd

    matrix, _, _ = cpu
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(lock_cmd, ["--check", "-m", str(matrix), "--torch-index-url", "none"],
                           standalone_mode=False)
    assert r.exception is None and r.return_value == 0 and "up to date" in r.output
    matrix.write_text(matrix.read_text().replace("runtime: [numpy]", "runtime: [numpy, six]"))
    r = CliRunner().invoke(lock_cmd, ["--check", "-m", str(matrix), "--torch-index-url", "none"],
                           standalone_mode=False)
    assert r.return_value == 1 and "six is not in the lock" in r.output
    matrix.write_text(matrix.read_text().replace("runtime: [numpy, six]", "runtime: [numpy]"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    torch = load(lock_path(matrix)).images["2.13.0-cpu-py3.11-debian12-runtime"].pin("torch")
    (wheels / torch.file).write_bytes(b"other bytes")
    r = CliRunner().invoke(lock_cmd, ["--check", "-m", str(matrix), "--torch-index-url", "none", "--wheelhouse",
                                      str(wheels)], standalone_mode=False)
    assert r.return_value == 1
    assert f"{wheels / torch.file} has sha256 {hashlib.sha256(b'other bytes').hexdigest()}, the lock has " \
           f"{torch.sha256} for torch==2.13.0" in r.output
    lock_path(matrix).unlink()
    r = CliRunner().invoke(build, ["-m", str(matrix), "--locked"], standalone_mode=False)
    assert isinstance(r.exception, LockError) and "--locked:" in str(r.exception)
    assert "does not exist" in str(r.exception)


def test_bad_lock_files_are_input_errors(tmp_path):
    with pytest.raises(LockError, match="lock_format None is not 1"):
        parse("images: {}\n", "a.lock")
    with pytest.raises(LockError, match=r"a.lock:3: images.x.pip\[0\].sha256: 'abc' is not a sha256"):
        parse('lock_format: 1\nimages:\n  x: {os: d, python: "3.11", platform: p, pip_requires: [], '
              'pip: [{name: a, version: "1", sha256: abc, file: a.whl}]}\n', "a.lock")
    with pytest.raises(LockError, match="a.lock: images.x: missing `platform`"):
        parse('lock_format: 1\nimages:\n  x: {os: d, python: "3.11", pip_requires: [], pip: []}\n', "a.lock")


def test_requirements_file_pins_every_file_with_its_hash():
    image = LockedImage("x", "debian12", "3.11", "p", (), (fake_pin("numpy", "2.0"), fake_pin("torch", "2.13.0+cpu")))
    text = requirements_text(image)
    assert f"numpy==2.0 \\\n    --hash=sha256:{sha_of('numpy2.0')}" in text
    assert f"torch==2.13.0+cpu \\\n    --hash=sha256:{sha_of('torch2.13.0+cpu')}" in text


def test_pins_from_a_pip_report(tmp_path):
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"not really a wheel")
    report = {"version": "1", "install": [
        {"metadata": {"name": "Jinja2", "version": "3.1.6"},
         "download_info": {"url": "https://files.example/p/jinja2-3.1.6-py3-none-any.whl",
                           "archive_info": {"hashes": {"sha256": "a" * 64}}}},
        {"metadata": {"name": "torch", "version": "2.13.0+cpu"},  # a wheelhouse file: hashed here, not trusted
         "download_info": {"url": "file://" + str(wheel).replace("+", "%2B"), "archive_info": {}}},
    ]}
    pins = pins_from_report(report)
    assert pins == [PipPin("jinja2", "3.1.6", "a" * 64, "jinja2-3.1.6-py3-none-any.whl"),
                    PipPin("torch", "2.13.0+cpu", hashlib.sha256(b"not really a wheel").hexdigest(), wheel.name)]


def test_pip_runs_without_this_machines_config_and_with_the_builds_sources(tmp_path, monkeypatch):
    calls = []

    def runner(cmd, **kw):
        calls.append((cmd, kw["env"]))
        report = Path(cmd[cmd.index("--report") + 1])
        report.write_text(json.dumps({"install": []}))
        return type("P", (), {"returncode": 0, "stdout": "", "stderr": ""})()

    from imagebuild.lock.pip import PipSource

    monkeypatch.setenv("PIP_FIND_LINKS", "/somewhere/else")
    src = PipSource(index_url="https://u:p@pypi.corp/simple", extra_index_urls=("https://x/whl/cpu",),
                    find_links=("/opt/wheels",))
    PipResolver(runner=runner).resolve(["numpy"], python="3.11", platforms=platform_tags("2.36"), source=src,
                                       constraints=["filelock==3.0"])
    cmd, env = calls[0]
    assert env["PIP_CONFIG_FILE"] == "/dev/null" and "PIP_FIND_LINKS" not in env
    joined = " ".join(cmd)
    assert "--index-url https://u:p@pypi.corp/simple --extra-index-url https://x/whl/cpu" in joined
    assert "--find-links /opt/wheels" in joined and "--python-version 3.11" in joined and "--constraint" in cmd
    assert "--platform manylinux_2_36_x86_64" in joined and "--platform manylinux_2_17_x86_64" in joined
    assert "--platform manylinux2014_x86_64" in joined and cmd[-1] == "numpy"


def test_platform_tags_cover_older_manylinux():
    tags = platform_tags("2.28")
    assert tags[0] == "manylinux_2_28_x86_64" and tags[-1] == "linux_x86_64"
    assert "manylinux2014_x86_64" in tags and "manylinux1_x86_64" in tags and "manylinux_2_29_x86_64" not in tags


@pytest.mark.parametrize("a,b,want", [
    ("1.0", "1.0", 0), ("1.0-1", "1.0-2", -1), ("1:1.0", "2.0", 1), ("1.0~rc1", "1.0", -1),
    ("20250419~deb12u2", "20250419", -1), ("3.11.2-6+deb12u9", "3.11.2-6+deb12u10", -1),
    ("2.36-9+deb12u14", "2.36-9", 1), ("1.0a", "1.0", 1), ("1.10", "1.9", 1),
])
def test_debian_version_order(a, b, want):
    assert compare_versions(a, b) == want
    assert compare_versions(b, a) == -want


def test_apt_versions_from_packages_indexes():
    main = "Package: gcc\nVersion: 4:12.2.0-3\n\nPackage: libc6-dev\nVersion: 2.36-9+deb12u10\n\n"
    security = "Package: libc6-dev\nVersion: 2.36-9+deb12u14\n"
    assert parse_packages(main) == {"gcc": "4:12.2.0-3", "libc6-dev": "2.36-9+deb12u10"}
    files = {"http://m/debian/dists/bookworm/main/binary-amd64/Packages": main.encode(),
             "http://m/debian-security/dists/bookworm-security/main/binary-amd64/Packages": security.encode(),
             "http://m/debian/dists/bookworm/InRelease": b"Origin: Debian\nDate: Sat, 11 Jul 2026 10:16:37 UTC\n"}

    def fetch(url, timeout):
        if url not in files:
            raise OSError("404")
        return files[url]

    index = AptIndex(fetch=fetch)
    lines = ["deb http://m/debian bookworm main", "deb http://m/debian-security bookworm-security main"]
    assert index.versions(lines, ["libc6-dev", "gcc"]) == {"gcc": "4:12.2.0-3", "libc6-dev": "2.36-9+deb12u14"}
    assert index.mirror_state(lines[:1]) == {"http://m/debian bookworm": "2026-07-11T10:16:37Z"}
    with pytest.raises(Exception, match=r"apt package\(s\) zsh not in the Packages indexes of bookworm, "
                                        r"bookworm-security"):
        index.versions(lines, ["zsh"])


def test_build_failure_names_the_file_and_both_hashes():
    stream = BuildStream()
    exp, got = "0" * 64, "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"
    for chunk in [
        {"stream": "Step 7/12 : RUN set -eux; pip install --require-hashes -r /tmp/imagebuild-lock.txt\n"},
        {"stream": "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated "
                   "the package versions, please update the hashes. Otherwise, examine the package contents "
                   "carefully; someone may have tampered with them.\n"},
        {"stream": "    six==1.17.0 from https://files.pythonhosted.org/packages/b7/ce/six-1.17.0-py2.py3-none-any"
                   ".whl (from -r /tmp/imagebuild-lock.txt (line 2)):\n"},
        {"stream": f"        Expected sha256 {exp}\n"},
        {"stream": f"             Got        {got}\n"},
        {"errorDetail": {"code": 1, "message": "The command '/bin/bash ...' returned a non-zero code: 1"},
         "error": "The command '/bin/bash ...' returned a non-zero code: 1"},
    ]:
        stream.feed(chunk)
    summary = stream.failure_summary()
    assert summary.startswith("pip refused 1 file(s)") and summary.endswith("(Step 7/12, pip install --require-hashes)")
    assert (f"six-1.17.0-py2.py3-none-any.whl (six==1.17.0): the lock expects sha256 {exp}, the file has sha256 "
            f"{got}") in summary


def test_build_failure_names_a_pinned_apt_version_the_mirror_lost():
    stream = BuildStream()
    stream.feed({"stream": "Step 3/9 : RUN set -eux; apt-get update; apt-get install gcc=4:12.2.0-2\n"})
    stream.feed({"stream": "E: Version '4:12.2.0-2' for 'gcc' was not found\n"})
    stream.feed({"error": "returned a non-zero code: 100"})
    assert stream.failure_summary().startswith("apt has no gcc=4:12.2.0-2: the lock's version is gone from the mirror")


def test_locker_records_registry_base_digest():
    locker = Locker(sources_for=lambda v: ([], ()), registry_digest=lambda ref: "sha256:" + "b" * 64)
    base = locker.base(type("V", (), {"base": type("B", (), {"kind": "registry", "ref": "nvidia/cuda:13.0.1-base"})()})(),
                       [], ())
    assert base == BaseLock(kind="registry", ref="nvidia/cuda:13.0.1-base", digest="sha256:" + "b" * 64)


def test_edits_inside_the_lock_are_found_by_check(cpu):
    """A deleted transitive pin, or a version changed with its hash kept, fit the matrix as before: only the
    content_sha256 in the header tells that the lock is not what `imagebuild lock` wrote."""
    matrix, plan, lock = cpu
    text = lock_path(matrix).read_text()
    assert parse(text).seal == "ok" and problems(parse(text), plan.images) == []
    rt = lock.images["2.13.0-cpu-py3.11-debian12-runtime"]
    transitive = next(p for p in rt.pip if p.name not in ("torch", "numpy"))
    line = next(ln for ln in text.splitlines() if f'name: "{transitive.name}"' in ln)
    for edited in (text.replace(line + "\n", ""),
                   text.replace(f'version: "{transitive.version}"', 'version: "99.0"', 1)):
        found = problems(parse(edited, "cpu.lock"), plan.images)
        assert found == ["cpu.lock: edited after `imagebuild lock` wrote it (its entries no longer give the "
                         "content_sha256 in its header)"]
    unsealed = "\n".join(ln for ln in text.splitlines() if not ln.startswith("content_sha256:"))
    assert problems(parse(unsealed, "cpu.lock"), plan.images)[-1].startswith("cpu.lock: has no content_sha256")


@pytest.mark.parametrize(("data", "message"), [
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "not UTF-8 text"),
    (b"lock_format: 1\nimages:\n  x: {os: d, python: '3.11', platform: p, pip_requires: [[1, 2]], pip: []}\n",
     r"pip_requires\[0\]: expected a string, got list"),
    (b"lock_format: 1\nimages:\n  x: {os: [d], python: '3.11', platform: p, pip_requires: [], pip: []}\n",
     "os: expected str, got list"),
    (b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     b"e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n", "expands to more"),
    (b"lock_format: 1\nimages: &i {x: *i}\n", "recursive alias"),
])
def test_damaged_lock_files_are_one_error(tmp_path, data, message):
    path = tmp_path / "cpu.lock"
    path.write_bytes(data)
    with pytest.raises(LockError, match=message) as err:
        load(path)
    assert err.value.exit_code == EXIT_BAD_INPUT and "\n" not in str(err.value)


def test_a_lock_of_millions_of_tiny_values_stops_early(tmp_path):
    """Composing 2 million YAML values took 19 s and 590 MB here; the parser's events are counted first."""
    import time

    path = tmp_path / "cpu.lock"
    path.write_text("lock_format: 1\nimages: [" + "a," * 1_900_000 + "a]\n")
    started = time.monotonic()
    with pytest.raises(LockError, match=r"cpu.lock:2: more than 200000 YAML values"):
        load(path)
    assert time.monotonic() - started < 5
