"""`imagebuild push` end to end with a fake engine and registry: dry run, credentials, exit codes, report."""

from __future__ import annotations

import json
import sys

import pytest
from _push_fakes import REG, add, fake_engine, fake_registry, make_image
from click.testing import CliRunner

from imagebuild.models import Plan
from imagebuild.record import load_record, store_result, updating
from imagebuild.smokeresult import SmokeResult


@pytest.fixture
def setup(monkeypatch, tmp_path):
    base = make_image(flavor="base", aliases=("2.9-cuda12.8-base",))
    rt = make_image(parent=base.tag, aliases=("2.9-cuda12.8-runtime",))
    plan = Plan("images/h100.yaml", [base, rt])
    reg = fake_registry()
    api = fake_engine(reg)
    for img in plan.images:
        add(api, img.tag, image_id="sha256:" + img.flavor, labels={"io.imagebuild.inputs-hash": img.inputs_hash})
    matrix = tmp_path / "h100.yaml"
    matrix.write_text("name: x\n")
    monkeypatch.setattr("imagebuild.pipeline.loaded.resolve_matrix_path", lambda m: matrix)
    monkeypatch.setattr("imagebuild.pipeline.loaded.make_plan", lambda *a, **k: plan)
    monkeypatch.setattr("imagebuild.engine.connect", lambda *a, **k: api)
    monkeypatch.setattr("imagebuild.push.pusher.RegistryClient", lambda *a, **k: reg)
    monkeypatch.setattr("imagebuild.push.pusher.Skopeo", lambda *a, **k: reg.copier())
    monkeypatch.setattr("imagebuild.push.pusher.time.sleep", lambda s: None)
    monkeypatch.delenv("IMAGEBUILD_REGISTRY_USER", raising=False)
    monkeypatch.delenv("IMAGEBUILD_REGISTRY_PASSWORD", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "dockercfg"))
    report = tmp_path / "reports"
    report.mkdir()
    for img in plan.images:
        passed(matrix, img)
    return plan, api, reg, report


def passed(matrix, img, failed=0):
    """The record says this image's content passed (or failed) the current suite with the plan's expectations."""
    from imagebuild.smoke import runner

    image_id = "sha256:" + img.flavor
    with updating(matrix) as rec:
        store_result(rec, f"k-{img.flavor}", image_id, runner.suite_version(), runner.expectations_for(img), {},
                     "cpu", SmokeResult(passed=5, failed=failed, skipped=0))


def run(args, stdin=None):
    from imagebuild.commands.push import command

    r = CliRunner().invoke(command, args, input=stdin, standalone_mode=False)
    r.code = r.return_value if r.exception is None else 2  # the CLI's main() exits with the returned code
    return r


def test_dry_run_prints_where(setup):
    plan, api, reg, report = setup
    r = run(["-m", "h100.yaml", "--dry-run", "--report-dir", str(report)])
    assert r.code == 0, r.output
    assert f"{plan.images[1].tag}\n    + alias 2.9-cuda12.8-runtime\n    -> {REG}" in r.output
    assert reg.sends == [] and reg.auth_checks == 0


def test_push_with_password_stdin_writes_report(setup, tmp_path):
    plan, api, reg, report = setup
    r = run(["-m", "h100.yaml", "-u", "alice", "--password-stdin", "--report-dir", str(report)],
            stdin="pw-from-stdin\n")
    assert r.code == 0, r.output
    assert "pw-from-stdin" not in r.output
    assert [password for *_, password in reg.sends] == ["pw-from-stdin"] * 2  # 2 images, each once by digest
    assert {reg.tags[(img.repository.split("/", 1)[1], a.rsplit(":", 1)[1])] for img in plan.images
            for a in (img.tag, *img.aliases)} == {sends[1] for sends in reg.sends}
    doc = json.loads((report / "build-report.json").read_text())
    assert [row["push"]["status"] for row in doc["images"]] == ["pushed", "pushed"]
    assert doc["run"]["command"] == "push" and doc["registry"] == REG
    # the push report keeps the recorded test result the gate read (a report without it says "not tested")
    assert [(row["tests"]["passed"], row["tests"]["failed"], row["tests"]["up_to_date"]) for row in doc["images"]] \
        == [(5, 0, True)] * 2
    assert "pw-from-stdin" not in (report / "build-report.json").read_text()
    rec = load_record(tmp_path / "h100.yaml")
    assert rec.images[plan.images[1].id].pushes[plan.images[1].repository]["image_id"] == "sha256:runtime"
    r = run(["-m", "h100.yaml", "-u", "alice", "--password-stdin", "--report-dir", str(report)],
            stdin="pw-from-stdin\n")
    assert r.code == 0
    assert sum(line.lstrip().startswith("unchanged ") for line in r.output.splitlines()) == 2
    assert len(reg.sends) == 2
    # the record's push of these very images, still served: neither saved nor compressed again
    assert rec.images[plan.images[1].id].pushes[plan.images[1].repository]["compression"] == "zstd"
    assert r.output.count("as the record pushed this image") == 2, r.output


def test_untested_images_are_not_pushed_by_default(setup):
    plan, api, reg, report = setup
    import shutil

    from imagebuild.record import state_dir

    shutil.rmtree(state_dir())
    passed(report.parent / "h100.yaml", plan.images[0])
    args = ["-m", "h100.yaml", "--report-dir", str(report)]
    r = run(args)
    assert r.code == 1 and "not tested" in r.output
    r = run(args + ["--untested", "--only", "*-runtime"])
    assert r.code == 0, r.output


def test_password_stdin_needs_username(setup):
    r = run(["-m", "h100.yaml", "--password-stdin"], stdin="x\n")
    assert r.code == 2 and "needs --username" in str(r.exception)


def test_wrong_password_exit_1_with_registry_message(setup, monkeypatch, capsys):
    plan, api, reg, report = setup
    reg.bad_auth = True
    monkeypatch.setattr(sys, "argv", ["imagebuild", "push", "-m", "h100.yaml", "-u", "alice", "--password-stdin",
                                      "--report-dir", str(report)])
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("wrong-password\n"))
    from imagebuild.cli import main

    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "unauthorized: authentication required" in err and "wrong-password" not in err
    assert reg.sends == [] and reg.auth_checks == 1


# -- the layer limit: named before anything is pushed ---------------------------------------------------------------

TIER_HISTORY = [  # the engine's answer, newest first: the runtime's nvidia and torch tiers
    {"CreatedBy": "/bin/sh -c #(nop) COPY file:aa in /etc/imagebuild/banner ", "Size": 100},
    {"CreatedBy": "/bin/sh -c #(nop) COPY dir:22 in / ", "Size": 3 * 10**9},
    {"CreatedBy": "/bin/sh -c #(nop) COPY dir:11 in / ", "Size": 9 * 10**9},
    {"CreatedBy": "/bin/sh -c #(nop) ADD file:00 in / ", "Size": 80 * 10**6},
]


def _tier_list(text: str) -> bytes:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("nvidia.txt")
        info.size = len(text.encode())
        tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


@pytest.fixture
def layered(setup):
    from dataclasses import replace

    plan, api, reg, report = setup
    rt = plan.images[1]
    plan.images[1] = replace(rt, env_layers=(("nvidia", "the NVIDIA CUDA wheels"), ("torch", "torch")))
    api.histories["sha256:runtime"] = TIER_HISTORY
    api.archives["sha256:runtime"] = _tier_list("nvidia-cudnn-cu12==9.10.2.21\nnvidia-cublas-cu12==12.8.4.1\n")
    return plan, api, reg, report


def test_a_layer_over_the_limit_is_refused_before_anything_is_pushed(layered):
    from imagebuild.pipeline.layers import LayerLimitError

    plan, api, reg, report = layered
    r = run(["-m", "h100.yaml", "--report-dir", str(report)])  # the default limit, 8 GiB (8.59 GB): 9 GB is over
    assert isinstance(r.exception, LayerLimitError) and r.exception.exit_code == 1
    text = str(r.exception)
    assert "\n" not in text and plan.images[1].tag in text and "'nvidia'" in text and "9.00 GB" in text
    assert "nvidia-cudnn-cu12==9.10.2.21" in text and "nothing was pushed" in text
    assert reg.sends == [] and reg.manifests == {} and reg.tags == {} and api.tag_calls == []  # nothing written


def test_the_limit_comes_from_the_flag_else_the_matrix(layered):
    from dataclasses import replace

    plan, api, reg, report = layered
    r = run(["-m", "h100.yaml", "--report-dir", str(report), "--layer-limit", "10GB"])
    assert r.code == 0, r.output
    assert len(reg.sends) == 2 and len(reg.tags) == 4  # each image once by digest, then its tag and alias
    rt = plan.images[1]
    plan.images[1] = replace(rt, variant=replace(rt.variant, layer_limit=2 * 10**9))
    reg.sends.clear()
    reg.tags.clear()
    r = run(["-m", "h100.yaml", "--report-dir", str(report)])
    assert "over the layer limit 2.00 GB" in str(r.exception) and reg.sends == [] and reg.tags == {}


def test_a_bad_layer_limit_is_one_usage_error(layered):
    import click

    plan, api, reg, report = layered
    r = run(["-m", "h100.yaml", "--layer-limit", "lots"])
    assert isinstance(r.exception, click.BadParameter) and "8GiB" in str(r.exception)
    assert reg.sends == [] and reg.tags == {}
