"""What is read out of an image is derived once per image ID and kept with the state (record/derived.py), so a no-op
`build` into a new report folder (every fresh CI runner) writes the same SBOMs without reading any image: the fake
engine's export (the whole filesystem streamed) is counted. A kept copy that does not hash to its name, or hashes
right but is not what it claims, is said (the warning names the file) and derived again; another image ID is read."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from _fake_engine import FakeEngine
from _support import chain, plan_of

from imagebuild.inventory import kept as codec
from imagebuild.inventory.model import DebPackage, ImageFiles, OSRelease, PyDist
from imagebuild.models import ImageResult
from imagebuild.pipeline.supply import diff_rebuilds, write_sboms
from imagebuild.record.derived import Derived, key_of

FIX = Path(__file__).resolve().parent / "fixtures" / "inventory"
SITE = "opt/venv/lib/python3.11/site-packages"


def _tar(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return out.getvalue()


def _filesystem(extra_python: str = "") -> bytes:
    files = {"etc/os-release": b'ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n',
             "var/lib/dpkg/status": (FIX / "dpkg-status").read_bytes(),
             f"{SITE}/torch-2.13.0+cpu.dist-info/METADATA": (FIX / "torch.METADATA").read_bytes()}
    if extra_python:
        files[f"{SITE}/{extra_python}-1.0.dist-info/METADATA"] = \
            f"Metadata-Version: 2.1\nName: {extra_python}\nVersion: 1.0\n".encode()
    return _tar(files)


class Counting(FakeEngine):
    """The fake engine, counting the image reads: export (the filesystem) and save (the image archive)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def export(self, image, *, name, labels):
        self.reads.append(image)
        self.filesystems.setdefault(image, _filesystem())  # an image the fake built: the one filesystem
        return super().export(image, name=name, labels=labels)

    def save(self, image):
        self.reads.append(image)
        return super().save(image)


@pytest.fixture
def built(tmp_path):
    """Two images (base, runtime) in a counting fake engine, their rows up to date."""
    engine = Counting()
    images = chain("2.13.0-cpu-py3.11-debian12", flavors=("base", "runtime"))
    plan = plan_of(images)
    rows = []
    for n, img in enumerate(images):
        iid = engine.add_image(img.tag, {"io.imagebuild.flavor": img.flavor}, Created="2026-11-30T20:01:02Z",
                               Architecture="amd64", Os="linux")
        engine.filesystems[iid] = _filesystem("extra" * n)
        row = ImageResult.of(img)
        row.status, row.image_id = "up-to-date", iid
        rows.append(row)
    return engine, plan, rows


def _sboms(engine, plan, rows, report: Path, state: Path, recorded=None) -> list[str]:
    """write_sboms as a build runs it (warnings of the run and of the kept store alike on `say`): what it said."""
    said: list[str] = []
    write_sboms(engine, plan, rows, report, recorded or {}, Derived(state, said.append), said.append)
    return said


def _kept_files(state: Path, image_id: str) -> list[Path]:
    return sorted((state / "derived" / image_id.removeprefix("sha256:")).iterdir())


def test_a_new_report_folder_gets_the_same_sboms_without_reading_any_image(built, tmp_path):
    engine, plan, rows = built
    assert _sboms(engine, plan, rows, tmp_path / "r1", tmp_path / "state") == []
    assert sorted(engine.reads) == sorted(r.image_id for r in rows)  # each image read once
    first = [dict(r.sbom or {}) for r in rows]
    recorded = {img.id: s for img, s in zip(plan.images, first, strict=True)}
    for row in rows:
        row.sbom = None
    engine.reads.clear()
    assert _sboms(engine, plan, rows, tmp_path / "r2", tmp_path / "state", recorded) == []
    assert engine.reads == []  # nothing read: the SBOMs came from the state's kept copies
    for row, before, img in zip(rows, first, plan.images, strict=True):
        assert row.sbom is not None and row.sbom["path"] == str(tmp_path / "r2" / "sbom" / f"{img.id}.cdx.json")
        assert row.sbom["sha256"] == before["sha256"] and row.sbom["components"] == before["components"] > 2
        assert {k: v for k, v in row.sbom.items() if k != "path"} == {k: v for k, v in before.items() if k != "path"}
        data = Path(row.sbom["path"]).read_bytes()
        assert data == Path(before["path"]).read_bytes()
        assert "sha256:" + hashlib.sha256(data).hexdigest() == row.sbom["sha256"]


def test_no_engine_call_beyond_inspect_for_a_kept_sbom(built, tmp_path):
    engine, plan, rows = built
    _sboms(engine, plan, rows, tmp_path / "r1", tmp_path / "state")

    def refuse(*a, **k):
        raise AssertionError("read the image")

    engine.export = engine.save = engine.copy_out = engine.history = refuse  # type: ignore[method-assign]
    assert _sboms(engine, plan, rows, tmp_path / "r2", tmp_path / "state") == []
    assert all((r.sbom or {}).get("sha256") for r in rows)


def test_a_tampered_kept_sbom_is_said_and_made_again_from_the_kept_files(built, tmp_path):
    engine, plan, rows = built
    state = tmp_path / "state"
    _sboms(engine, plan, rows, tmp_path / "r1", state)
    want = rows[1].sbom["sha256"]  # type: ignore[index]
    [sbom_copy] = [p for p in _kept_files(state, rows[1].image_id) if p.name.startswith("sbom-")]
    sbom_copy.write_bytes(sbom_copy.read_bytes().replace(b"torch", b"t0rch"))
    engine.reads.clear()
    said = _sboms(engine, plan, rows, tmp_path / "r2", state)
    assert len(said) == 1 and str(sbom_copy) in said[0] and "do not hash" in said[0]
    assert engine.reads == []  # the SBOM is made again from the kept files part, not from the image
    assert rows[1].sbom["sha256"] == want  # type: ignore[index]
    assert sbom_copy.is_file() and hashlib.sha256(sbom_copy.read_bytes()).hexdigest() == sbom_copy.name[-64:]


def test_tampered_kept_files_and_sbom_read_the_image_again(built, tmp_path):
    engine, plan, rows = built
    state = tmp_path / "state"
    _sboms(engine, plan, rows, tmp_path / "r1", state)
    want = rows[0].sbom["sha256"]  # type: ignore[index]
    for path in _kept_files(state, rows[0].image_id):
        path.write_bytes(path.read_bytes()[:-7])  # cut short
    engine.reads.clear()
    said = _sboms(engine, plan, rows, tmp_path / "r2", state)
    assert len(said) == 2 and all("kept copy not used" in s for s in said)
    assert engine.reads == [rows[0].image_id]  # that image only, once
    assert rows[0].sbom["sha256"] == want  # type: ignore[index]


def test_a_planted_copy_that_hashes_right_but_is_no_sbom_of_the_image_is_not_used(built, tmp_path):
    engine, plan, rows = built
    state = tmp_path / "state"
    _sboms(engine, plan, rows, tmp_path / "r1", state)
    want = rows[0].sbom["sha256"]  # type: ignore[index]
    [sbom_copy] = [p for p in _kept_files(state, rows[0].image_id) if p.name.startswith("sbom-")]
    [files_copy] = [p for p in _kept_files(state, rows[0].image_id) if p.name.startswith("inventory-files-")]
    for path, data in ((sbom_copy, b'{"bomFormat": "CycloneDX", "metadata": {"component": {"bom-ref": "x"}}}'),
                       (files_copy, b'{"format": 1, "os_release": {}, "debs": [{"name": 1}], "pythons": []}')):
        path.unlink()
        stem = path.name.rpartition(".")[0]
        (path.parent / f"{stem}.{hashlib.sha256(data).hexdigest()}").write_bytes(data)
    engine.reads.clear()
    said = _sboms(engine, plan, rows, tmp_path / "r2", state)
    assert len(said) == 2 and "not a CycloneDX SBOM of" in said[0] and "must be a string" in said[1]
    assert engine.reads == [rows[0].image_id] and rows[0].sbom["sha256"] == want  # type: ignore[index]


def test_a_link_planted_as_a_kept_copy_is_not_followed(built, tmp_path):
    engine, plan, rows = built
    state = tmp_path / "state"
    _sboms(engine, plan, rows, tmp_path / "r1", state)
    [sbom_copy] = [p for p in _kept_files(state, rows[0].image_id) if p.name.startswith("sbom-")]
    outside = tmp_path / "elsewhere.json"
    outside.write_bytes(sbom_copy.read_bytes())
    sbom_copy.unlink()
    sbom_copy.symlink_to(outside)
    said = _sboms(engine, plan, rows, tmp_path / "r2", state)
    assert len(said) == 1 and str(sbom_copy) in said[0] and "not a regular file" in said[0]
    assert outside.is_file() and not sbom_copy.is_symlink()  # the link removed, never what it named


def test_another_image_id_is_read_and_kept_beside_the_first(built, tmp_path):
    engine, plan, rows = built
    state = tmp_path / "state"
    _sboms(engine, plan, rows, tmp_path / "r1", state)
    old = rows[1].image_id
    old_sha = rows[1].sbom["sha256"]  # type: ignore[index]
    new = engine.add_image(plan.images[1].tag, {"io.imagebuild.flavor": "runtime", "rebuilt": "1"})
    engine.filesystems[new] = _filesystem("other")
    rows[1].image_id, rows[1].status = new, "built"
    engine.reads.clear()
    assert _sboms(engine, plan, rows, tmp_path / "r2", state) == []
    assert engine.reads == [new]  # the rebuilt image only
    assert rows[1].sbom["image_id"] == new and rows[1].sbom["sha256"] != old_sha  # type: ignore[index]
    assert _kept_files(state, old) and _kept_files(state, new)
    said: list[str] = []
    engine.reads.clear()  # the rebuild's diff: both images' files are kept (the old one's by its earlier SBOM)
    diff_rebuilds(engine, plan, rows, {rows[1].tag: old}, Derived(state, print), said.append)
    assert said == [] and engine.reads == [] and rows[1].diff is not None
    assert rows[1].diff["python"]["added"] == 1 and rows[1].diff["python"]["removed"] == 1


def test_what_else_goes_into_an_sbom_makes_it_again_from_the_kept_files(built, tmp_path, monkeypatch):
    """The lock's hashes, SOURCE_DATE_EPOCH and the image's repo digests are part of the SBOM: another one makes a
    new SBOM (as a read of the image would), from the kept files, without reading the image."""
    engine, plan, rows = built
    state = tmp_path / "state"
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    _sboms(engine, plan, rows, tmp_path / "r1", state)
    first = rows[0].sbom["sha256"]  # type: ignore[index]
    engine.reads.clear()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    _sboms(engine, plan, rows, tmp_path / "r2", state)
    second = rows[0].sbom["sha256"]  # type: ignore[index]
    assert second != first and engine.reads == []
    doc = json.loads(Path(rows[0].sbom["path"]).read_text())  # type: ignore[index]
    assert doc["metadata"]["timestamp"] == "2023-11-14T22:13:20Z"
    engine.images_by_id[rows[0].image_id]["RepoDigests"] = ["reg.example/ml/pytorch@sha256:" + "cd" * 32]
    _sboms(engine, plan, rows, tmp_path / "r3", state)
    doc = json.loads(Path(rows[0].sbom["path"]).read_text())  # type: ignore[index]
    assert doc["metadata"]["component"]["purl"].startswith("pkg:oci/pytorch@") and engine.reads == []
    assert len([p for p in _kept_files(state, rows[0].image_id) if p.name.startswith("sbom-")]) == 1  # replaced


def test_the_kept_files_round_trip_and_refuse_anything_else():
    files = ImageFiles(OSRelease(id="debian", version_id="12", id_like=("x",)),
                       (DebPackage("libc6", "2.36", licenses=("LGPL-2.1",)),),
                       (PyDist("torch", "2.13.0", "/opt/venv", license_classifiers=("BSD",)),))
    data = codec.dumps(files)
    assert codec.loads(data) == files and codec.dumps(codec.loads(data)) == data
    for bad in (b"\xff", b"[]", b'{"format": 2}', b'{"format": 1, "debs": {}, "pythons": []}',
                b'{"format": 1, "debs": [{"name": "a"}], "pythons": []}',
                b'{"format": 1, "debs": [{"name": "a", "version": "1", "evil": "x"}], "pythons": []}',
                b'{"format": 1, "os_release": {"id_like": "debian"}, "debs": [], "pythons": []}',
                b"[" * 100_000):
        with pytest.raises(ValueError):
            codec.loads(bad)


def test_the_store_takes_only_full_image_ids_and_plain_names(tmp_path):
    kept = Derived(tmp_path / "state", print)
    iid = "sha256:" + "ab" * 32
    kept.put(iid, "sbom-1", b"x")
    assert kept.get(iid, "sbom-1") == b"x" and kept.get(iid, "sbom-2") is None
    for bad_id, bad_name in (("sha256:abc", "sbom-1"), ("../../etc", "sbom-1"), (iid, "../x"), (iid, "A")):
        kept.put(bad_id, bad_name, b"y")
        assert kept.get(bad_id, bad_name) is None
    assert [p.name for p in (tmp_path / "state" / "derived").iterdir()] == ["ab" * 32]
    assert key_of("a") != key_of("b") and key_of("a") == key_of("a")


def test_a_state_folder_that_cannot_be_written_is_a_warning_not_a_failure(built, tmp_path):
    engine, plan, rows = built
    state = tmp_path / "state"
    state.mkdir()
    (state / "derived").write_text("a file where the folder goes")
    said = _sboms(engine, plan, rows, tmp_path / "r1", state)
    assert all((r.sbom or {}).get("sha256") for r in rows)  # the report's SBOMs are written all the same
    assert said and all(s.startswith("warning: kept derived file:") and "not kept" in s for s in said)


def test_a_kept_copy_larger_than_any_this_tool_keeps_is_not_read(built, tmp_path, monkeypatch):
    from imagebuild.record import derived

    engine, plan, rows = built
    state = tmp_path / "state"
    _sboms(engine, plan, rows, tmp_path / "r1", state)
    monkeypatch.setattr(derived, "MAX_KEPT_BYTES", 100)  # the bound: a bigger file is never read whole
    engine.reads.clear()
    said = _sboms(engine, plan, rows, tmp_path / "r2", state)
    assert len(said) == 4 and all("larger than" in s for s in said)
    assert sorted(engine.reads) == sorted(r.image_id for r in rows)


def test_a_kept_sbom_loads_neither_the_inventory_readers_nor_the_sbom_writer(built, tmp_path):
    """The no-op into a new report folder stays on the no-op path (tests/unit/test_noop_path.py): a fresh
    interpreter copying kept SBOMs imports nothing of imagebuild.inventory or imagebuild.lock."""
    engine, plan, rows = built
    _sboms(engine, plan, rows, tmp_path / "r1", tmp_path / "state")
    images = [(img.tag, r.image_id) for img, r in zip(plan.images, rows, strict=True)]
    code = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from pathlib import Path
from _fake_engine import FakeEngine
from _support import chain, plan_of
from imagebuild.models import ImageResult
from imagebuild.pipeline.supply import write_sboms
from imagebuild.record.derived import Derived
engine, said = FakeEngine(), []
plan = plan_of(chain("2.13.0-cpu-py3.11-debian12", flavors=("base", "runtime")))
rows = []
for (tag, iid), img in zip({images!r}, plan.images):
    engine.add_image(tag, {{}}, image_id=iid)
    rows.append(ImageResult.of(img))
    rows[-1].status, rows[-1].image_id = "up-to-date", iid
write_sboms(engine, plan, rows, Path({str(tmp_path / "r2")!r}), {{}}, Derived({str(tmp_path / "state")!r}, said.append),
            said.append)
assert not said and all(r.sbom and r.sbom.get("sha256") for r in rows), (said, rows)
loaded = sorted(m for m in sys.modules if m.startswith(("imagebuild.inventory", "imagebuild.lock")))
sys.exit("loaded: " + ", ".join(loaded) if loaded else 0)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "r2" / "sbom").is_dir()


def test_a_no_op_build_into_a_new_report_folder_reads_no_image(tmp_path, monkeypatch):
    """The whole `build` run (pipeline.flow): every image up to date; the second run, into another report folder,
    reads no image and reports the same SBOM digests, kept under the run's --state-dir."""
    import imagebuild.engine
    from imagebuild.inputs import BuildInputs
    from imagebuild.models import Plan
    from imagebuild.pipeline import flow
    from imagebuild.pipeline.settings import BuildSettings, RunOptions, Step

    images = chain("2.13.0-cpu-py3.11-debian12", flavors=("base", "runtime"))
    matrix = tmp_path / "cpu.yaml"
    matrix.write_text("x: 1\n")
    monkeypatch.setattr("imagebuild.pipeline.loaded.make_plan", lambda *a, **k: Plan(str(matrix), images))
    engine = Counting()
    engine.add_image("example/os:1@sha256:" + "0" * 64, {})
    monkeypatch.setattr("imagebuild.pipeline.building.unreachable", lambda *a, **k: {})
    monkeypatch.setattr(imagebuild.engine, "connect", lambda *a, **k: engine)
    state = tmp_path / "my-state"

    def build(report: str, status: str) -> list[dict]:
        options = RunOptions(Step.BUILD, str(matrix), inputs=BuildInputs(backend="classic"), state_dir=str(state),
                             report_dir=tmp_path / report, build=BuildSettings(plain=True))
        result = flow.build_run(options, print, print)
        assert result.ok and [r.status for r in result.results] == [status] * 2
        return [dict(r.sbom or {}) for r in result.results]

    first = build("r1", "built")
    assert sorted(engine.reads) == sorted(engine.tags[i.tag] for i in images)  # each read once, for its SBOM
    engine.reads.clear()
    second = build("r2", "up-to-date")
    assert engine.reads == []
    assert [s["sha256"] for s in second] == [s["sha256"] for s in first]
    assert all(s["path"].startswith(str(tmp_path / "r2")) for s in second)
    assert len(list((state / "derived").iterdir())) == 2


def _build_plan(engine, plan, tmp_path: Path, kept: Derived | None):
    from imagebuild.builder.executor import build_plan
    from imagebuild.builder.options import BuildOptions
    from imagebuild.builder.progress import Progress

    opts = BuildOptions(log_dir=tmp_path / "logs", check_disk=False, revision="abc", created="2026-01-01T00:00:00Z",
                        proxies={}, kept=kept)
    return build_plan(engine, plan, opts, Progress())


def test_an_images_history_is_asked_once_per_image_id_and_kept(tmp_path):
    """describe's size, largest layers and environment layers come from the image's history: asked of the engine
    once per image ID (and storage driver), then read from the state; the same rows either way."""
    engine = FakeEngine()
    engine.add_image("example/os:1@sha256:" + "0" * 64, {})
    plan = plan_of(chain("a", flavors=("base", "runtime")))
    said: list[str] = []
    kept = Derived(tmp_path / "state", said.append)
    asked: list[str] = []
    steps = [{"Size": 5, "CreatedBy": "RUN x https://u:secret-pw@idx.example/simple"},
             {"Size": 0, "CreatedBy": None, "Comment": "not kept"}]
    engine.history = lambda image: asked.append(image) or steps  # type: ignore[method-assign]
    first = _build_plan(engine, plan, tmp_path, kept)
    assert [r.status for r in first] == ["built"] * 2 and len(asked) == 2
    assert first[0].size == 1000 and first[0].layers == [{"size": 5, "created_by": "RUN x https://u:***@idx.example/simple"}]
    kept_files = [p for r in first for p in _kept_files(tmp_path / "state", r.image_id or "")]
    assert kept_files and all(p.name.startswith("history-") for p in kept_files)
    assert all(b"secret-pw" not in p.read_bytes() for p in kept_files)  # redacted before it is kept
    asked.clear()
    again = _build_plan(engine, plan, tmp_path, kept)  # up to date: from the state
    assert [r.status for r in again] == ["up-to-date"] * 2 and asked == [] and said == []
    assert [(r.size, r.layers, r.env_layers) for r in again] == [(r.size, r.layers, r.env_layers) for r in first]
    kept_files[0].write_bytes(b'[{"Size": "5", "CreatedBy": "x"}]')  # planted (renamed to its own digest below)
    kept_files[0].rename(kept_files[0].with_name(
        kept_files[0].name.rpartition(".")[0] + "." + hashlib.sha256(kept_files[0].read_bytes()).hexdigest()))
    _build_plan(engine, plan, tmp_path, kept)
    assert len(asked) == 1 and len(said) == 1 and "not a kept history" in said[0]
    asked.clear()
    engine.images_by_id[first[1].image_id]["GraphDriver"] = {"Name": "overlayfs"}  # another engine's sizes
    _build_plan(engine, plan, tmp_path, kept)
    assert asked == [first[1].image_id]
    assert len([p for p in _kept_files(tmp_path / "state", first[1].image_id or "")]) == 1  # the other replaced


# -- `sbom` and `diff` read an image a build read before from the state's kept files ---------------------------------

def _opener(engine, state: Path | None, monkeypatch, said: list[str]):
    from imagebuild.inventory.open import Opener
    from imagebuild.pipeline.keptfiles import kept_files_of

    if state is None:
        monkeypatch.delenv("IMAGEBUILD_STATE_DIR", raising=False)
    else:
        monkeypatch.setenv("IMAGEBUILD_STATE_DIR", str(state))
    return Opener(lambda: engine, files_of=kept_files_of(said.append))


def test_sbom_and_diff_take_the_files_a_build_kept_and_give_the_same_inventory(built, tmp_path, monkeypatch):
    from imagebuild.inventory import dump_sbom, make_sbom
    from imagebuild.inventory.open import Opener

    engine, plan, rows = built
    state = tmp_path / "state"
    _sboms(engine, plan, rows, tmp_path / "r1", state)  # the build: each image read once, its files kept
    engine.reads.clear()
    said: list[str] = []
    kept = _opener(engine, state, monkeypatch, said).open(plan.images[1].tag)
    assert engine.reads == [] and said == []  # nothing read out of the image
    fresh = Opener(lambda: engine).open(plan.images[1].tag)  # no kept files: the image read
    assert engine.reads == [rows[1].image_id]
    assert kept == fresh and dump_sbom(make_sbom(kept)) == dump_sbom(make_sbom(fresh))


def test_an_image_never_read_is_read_once_and_kept_for_the_next_command(built, tmp_path, monkeypatch):
    engine, plan, rows = built
    state = tmp_path / "state"
    state.mkdir()
    said: list[str] = []
    _opener(engine, state, monkeypatch, said).open(plan.images[0].tag)
    _opener(engine, state, monkeypatch, said).open(plan.images[0].tag)
    assert engine.reads == [rows[0].image_id] and said == []
    assert [p.name.startswith("inventory-files-") for p in _kept_files(state, rows[0].image_id)] == [True]


def test_tampered_kept_files_are_said_and_the_image_read(built, tmp_path, monkeypatch):
    engine, plan, rows = built
    state = tmp_path / "state"
    _sboms(engine, plan, rows, tmp_path / "r1", state)
    files = next(p for p in _kept_files(state, rows[1].image_id) if p.name.startswith("inventory-files-"))
    files.write_bytes(files.read_bytes().replace(b"torch", b"t0rch"))
    engine.reads.clear()
    said: list[str] = []
    inv = _opener(engine, state, monkeypatch, said).open(plan.images[1].tag)
    assert engine.reads == [rows[1].image_id] and any(p.name == "torch" for p in inv.pythons)
    assert len(said) == 1 and str(files) in said[0] and "kept copy not used" in said[0]


def test_without_a_state_folder_the_image_is_read_and_no_folder_made(built, tmp_path, monkeypatch):
    engine, plan, rows = built
    monkeypatch.chdir(tmp_path)
    said: list[str] = []
    _opener(engine, None, monkeypatch, said).open(plan.images[0].tag)
    assert engine.reads == [rows[0].image_id] and not (tmp_path / ".imagebuild").exists() and said == []
