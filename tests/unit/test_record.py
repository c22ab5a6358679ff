"""The per-matrix record: round trip, what is never trusted, and the rules the build's results are folded in by."""

from __future__ import annotations

import json

import pytest
from _push_fakes import make_image

from imagebuild.inputs import BuildInputs
from imagebuild.models import ImageResult, Plan
from imagebuild.record import load_record, record_path, updating
from imagebuild.record.update import fill_row, record_build


def matrix(tmp_path):
    m = tmp_path / "cpu.yaml"
    m.write_text("name: x\n")
    return m


def test_round_trip_and_inputs(tmp_path):
    m = matrix(tmp_path)
    inputs = BuildInputs(wheelhouse=tmp_path, torch_index_url="none",
                         pip_index_url="https://user:s3cret@pypi.corp/simple")
    with updating(m, inputs, "127.0.0.1:5000/ml", replace_inputs=True):
        pass
    text = record_path(m).read_text()
    assert "s3cret" not in text  # credentials never written
    rec = load_record(m)
    assert rec.problem is None and rec.registry == "127.0.0.1:5000/ml"
    back = rec.build_inputs()
    assert back.wheelhouse == tmp_path and back.torch_index_url == "none"
    assert "--wheelhouse" in rec.describe_inputs() and "s3cret" not in rec.describe_inputs()


def test_other_schema_or_other_matrix_is_never_trusted(tmp_path):
    m = matrix(tmp_path)
    with updating(m, BuildInputs(), None, replace_inputs=True):
        pass
    doc = json.loads(record_path(m).read_text())
    record_path(m).write_text(json.dumps({**doc, "schema": 0, "images": {"x": {"id": "x", "flavor": "base",
                                                                              "inputs_hash": "h"}}}))
    rec = load_record(m)
    assert "record schema 0" in rec.problem and rec.images == {}
    other = tmp_path / "sub"
    other.mkdir()
    (other / "cpu.yaml").write_text("name: y\n")
    record_path(m).write_text(json.dumps(doc))
    rec = load_record(other / "cpu.yaml")
    assert "records another matrix file" in rec.problem
    record_path(m).write_text("{not json")
    assert "unreadable" in load_record(m).problem


def test_a_matrix_path_masked_by_a_secret_is_still_this_matrix(tmp_path, monkeypatch):
    """A run that knew a secret which is also a fragment of a folder's name (a signing key's password `bench-loop`,
    a folder `ib-bench-loop-x`) wrote the record's matrix path masked: the record is still this matrix's, read by a
    run with or without that secret; another matrix file is still refused."""
    from imagebuild import secrets

    folder = tmp_path / "ib-bench-loop-x"
    folder.mkdir()
    m = matrix(folder)
    monkeypatch.setattr(secrets, "_SECRETS", {"bench-loop"})
    with updating(m, BuildInputs(), None, replace_inputs=True):
        pass
    assert json.loads(record_path(m).read_text())["matrix"].endswith("/ib-***-x/cpu.yaml")
    assert load_record(m).problem is None
    monkeypatch.setattr(secrets, "_SECRETS", set())
    assert load_record(m).problem is None
    other = tmp_path / "ib-other-x"
    other.mkdir()
    (other / "cpu.yaml").write_text("name: y\n")
    record_path(other / "cpu.yaml").write_text(record_path(m).read_text())
    assert "records another matrix file" not in (load_record(other / "cpu.yaml").problem or "")  # (*** fits `other`)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "cpu.yaml").write_text("name: y\n")
    record_path(tmp_path / "elsewhere" / "cpu.yaml").write_text(record_path(m).read_text())
    assert "records another matrix file" in load_record(tmp_path / "elsewhere" / "cpu.yaml").problem


def test_no_op_keeps_the_build_that_made_the_image(tmp_path):
    m = matrix(tmp_path)
    img = make_image(flavor="base")
    plan = Plan(str(m), [img])
    built = ImageResult.of(img)
    built.status, built.image_id, built.build_seconds, built.size = "built", "sha256:aa", 75.0, 100
    with updating(m, BuildInputs(), None, replace_inputs=True) as rec:
        record_build(rec, plan, [built])
    again = ImageResult.of(img)
    again.status, again.image_id, again.build_seconds = "up-to-date", "sha256:aa", 0.1
    with updating(m) as rec:
        record_build(rec, plan, [again])
    assert again.build_seconds == 75.0 and again.built_at
    entry = load_record(m).images[img.id]
    assert entry.build_seconds == 75.0 and entry.image_id == "sha256:aa" and entry.tags[img.repository][0] == img.tag
    # a failed rebuild of the same inputs keeps the last good image; fill_row shows it
    failed = ImageResult.of(img)
    failed.status, failed.error = "failed", "step 3 failed"
    with updating(m) as rec:
        record_build(rec, plan, [failed])
    entry = load_record(m).images[img.id]
    assert entry.image_id == "sha256:aa" and entry.status == "failed" and entry.error == "step 3 failed"
    row = fill_row(load_record(m), img, ImageResult.of(img))
    assert row.image_id == "sha256:aa" and row.build_seconds == 75.0
    # other inputs: a new entry, the old image is not shown for them
    img.inputs_hash = "h-other"
    assert fill_row(load_record(m), img, ImageResult.of(img)).image_id is None


@pytest.mark.parametrize(("doc", "why"), [
    ([], "expected a JSON object, got a list"),
    ({"schema": 1, "images": []}, "'images' must be an object or null"),
    ({"schema": 1, "images": {"x": "built"}}, "images.x must be an object"),
    ({"schema": 1, "images": {"x": {"id": "x", "flavor": "base"}}}, "images.x lacks 'inputs_hash'"),
    ({"schema": 1, "images": {"x": {"id": "x", "flavor": "base", "inputs_hash": "h", "tags": {"": "t"}}}},
     "images.x.tags. must be a list of strings"),
    ({"schema": "1"}, "'schema' must be a number"),
    ({"schema": 1, "inputs": {"ca_certs": "a.pem"}}, "inputs.ca_certs must be a list of strings"),
    ({"schema": 1, "tests": {"k": 3}}, "tests.k must be an object"),
])
def test_wrong_shape_is_said_and_replaced_by_the_next_build(tmp_path, doc, why):
    """Valid JSON of the wrong shape used to raise in every command (and `build` never replaced it)."""
    m = matrix(tmp_path)
    record_path(m).parent.mkdir(parents=True, exist_ok=True)
    record_path(m).write_text(json.dumps(doc))
    rec = load_record(m)
    assert rec.problem == f"{record_path(m)}: unreadable ({why}); it is ignored and will be replaced"
    assert rec.images == {} and rec.tests == {}
    with updating(m, BuildInputs(), None, replace_inputs=True) as rec_w:
        assert rec_w.problem is None
    assert load_record(m).problem is None


def test_binary_or_huge_record_is_a_problem_not_a_crash(tmp_path):
    m = matrix(tmp_path)
    record_path(m).parent.mkdir(parents=True, exist_ok=True)
    record_path(m).write_bytes(b"\x00\xff" * 10)
    assert "not UTF-8 text" in load_record(m).problem
    record_path(m).write_bytes(b"[" * 200_000)
    assert "unreadable" in load_record(m).problem


def test_the_backend_is_a_recorded_input(tmp_path):
    """A plan made for BuildKit renders other Dockerfiles (other inputs hashes): `test`/`push` after `build --backend
    buildkit` must plan with it again, or every image looks stale."""
    m = matrix(tmp_path)
    with updating(m, BuildInputs(backend="buildkit"), None, replace_inputs=True):
        pass
    rec = load_record(m)
    assert rec.build_inputs().backend == "buildkit" and "--backend buildkit" in rec.describe_inputs()
    with updating(m, BuildInputs(), None, replace_inputs=True):
        pass
    assert load_record(m).build_inputs().backend is None


@pytest.mark.parametrize(("where", "value", "message"), [
    ("image_id", "sha256:aa; docker rm -f x", "image_id: 'sha256:aa; docker rm -f x' is not an image ID"),
    ("built_at", "yesterday", "built_at: 'yesterday' is not an RFC 3339 date"),
    ("exports", {"squashfs": {"path": "/s/x.sqsh\n#SBATCH --wrap=x", "image_id": "sha256:aa"}},
     "exports.squashfs.path: '/s/x.sqsh\\n#SBATCH --wrap=x' is not a one-line text"),
    ("pushes", {"reg": {"digest": "sha256:zz", "status": "pushed"}}, "pushes.reg.digest: 'sha256:zz' is not a digest"),
])
def test_a_hand_edited_record_value_is_said_and_never_used(tmp_path, where, value, message):
    m = matrix(tmp_path)
    img = make_image(flavor="base")
    built = ImageResult.of(img)
    built.status, built.image_id = "built", "sha256:aa"
    with updating(m, BuildInputs(), None, replace_inputs=True) as rec:
        record_build(rec, Plan(str(m), [img]), [built])
    assert load_record(m).problem is None and load_record(m).images[img.id].image_id == "sha256:aa"  # the good case
    doc = json.loads(record_path(m).read_text())
    doc["images"][img.id][where] = value
    record_path(m).write_text(json.dumps(doc))
    rec = load_record(m)
    assert rec.problem is not None and message in rec.problem and "\n" not in rec.problem
    assert rec.images == {}
