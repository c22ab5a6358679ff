"""refresh: parse pip's --report (trimmed real reports), diff against torch.yaml, write it back keeping comments."""

import json
import subprocess

import pytest
import yaml
from click.testing import CliRunner

from imagebuild.cli import cli
from imagebuild.compat import load_from
from imagebuild.compat import refresh as rf
from imagebuild.compat.tables import data_path

COND = '; platform_system == "Linux" and platform_machine == "x86_64"'
CLASSIFIERS = [f"Programming Language :: Python :: 3.{m}" for m in range(10, 15)]


def report(version: str, requires: list[str], wheel: str) -> dict:
    return {"version": "1", "install": [{
        "download_info": {"url": f"https://files.pythonhosted.org/packages/xx/{wheel}"},
        "metadata": {"name": "torch", "version": version, "requires_python": ">=3.10",
                     "classifier": ["Programming Language :: C++", *CLASSIFIERS],
                     "requires_dist": [r + COND for r in requires] + ['pyyaml; extra == "pyyaml"', "filelock"]},
    }]}


# Trimmed from `pip install --dry-run --report` of torch 2.9.1 and 2.14.1 (PyPI, 2026-11).
R291 = report("2.9.1", ["nvidia-cuda-runtime-cu12==12.8.90", "nvidia-cudnn-cu12==9.10.2.21",
                        "nvidia-nccl-cu12==2.27.5", "triton==3.5.1"],
              "torch-2.9.1-cp312-cp312-manylinux_2_28_x86_64.whl")
R2141 = report("2.14.1", ["cuda-toolkit[cublas,cudart,cufft]==13.0.3", "cuda-bindings<14,>=13.0.3",
                          "nvidia-cudnn-cu13==9.24.0.43", "nvidia-nccl-cu13==2.30.7", "triton~=3.8.0"],
               "torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl")


def test_parse_cu12_report():
    pins = rf.parse_report(R291)
    assert pins == rf.WheelPins(torch="2.9.1", cuda="12.8", cudnn="9.10.2.21", nccl="2.27.5", triton="3.5.1",
                                python=("3.10", "3.14"), glibc="2.28", wheel=pins.wheel)


def test_parse_cu13_report_with_compatible_release_triton():
    pins = rf.parse_report(R2141)
    assert (pins.cuda, pins.cudnn, pins.nccl, pins.triton) == ("13.0", "9.24.0.43", "2.30.7", "3.8.0")


def test_parse_cpu_and_local_label():
    cpu = report("2.13.0+cpu", [], "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    pins = rf.parse_report(cpu)
    assert (pins.torch, pins.cuda, pins.cudnn) == ("2.13.0", "cpu", None)


def test_no_torch_in_report():
    with pytest.raises(Exception, match="no torch wheel"):
        rf.parse_report({"install": []})


def test_diff_matches_data():
    tables = load_from(data_path("torch.yaml").parent)
    assert rf.diff(tables, rf.parse_report(R291), default=True) == []
    changed = rf.parse_report(report("2.9.1", ["nvidia-cuda-runtime-cu12==12.8.90", "nvidia-cudnn-cu12==9.11.0.1",
                                               "nvidia-nccl-cu12==2.27.5", "triton==3.5.1"], "torch-2.9.1-x.whl"))
    assert rf.diff(tables, changed, default=True) == ["2.9.1 cu128: cudnn 9.10.2.21 → 9.11.0.1"]


def _copy_data(tmp_path):
    for name in ("torch.yaml", "cuda.yaml", "os.yaml", "transformer_engine.yaml", "platforms.yaml"):
        (tmp_path / name).write_text(data_path(name).read_text())
    return tmp_path / "torch.yaml"


def test_update_text_edits_one_line_and_keeps_comments(tmp_path):
    path = _copy_data(tmp_path)
    before = path.read_text()
    pins = rf.WheelPins("2.7.1", "12.8", "9.7.1.99", "2.26.2", "3.3.1", ("3.9", "3.13"), "2.28", "w.whl")
    after = rf.update_text(before, pins, default=False)
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    assert changed == [(
        '      "12.8": {cudnn: "9.7.1.26", nccl: "2.26.2", triton: "3.3.1", archs: [sm_75, sm_80, sm_86, sm_90, '
        'sm_100, sm_120], confirmed: false}',
        '      "12.8": {cudnn: "9.7.1.99", nccl: "2.26.2", triton: "3.3.1", archs: [sm_75, sm_80, sm_86, sm_90, '
        'sm_100, sm_120], confirmed: true}')]
    assert "# The first Blackwell builds" in after
    path.write_text(after)
    v = load_from(tmp_path).torch["2.7.1"].variants["12.8"]
    assert v.cudnn == "9.7.1.99" and v.confirmed and "sm_70" not in v.archs


def test_update_text_adds_variant_and_release(tmp_path):
    path = _copy_data(tmp_path)
    text = path.read_text()
    text = rf.update_text(text, rf.WheelPins("2.9.1", "12.9", "9.10.2.21", "2.27.5", "3.5.1", None, None, "w"),
                          default=False)
    text = rf.update_text(text, rf.WheelPins("2.15.0", "13.0", "9.25.0.1", "2.31.0", "3.9.0", ("3.10", "3.14"),
                                             "2.28", "w"), default=True)
    assert yaml.safe_load(text)["releases"]["2.9.1"]["pypi_default"] == "12.8"
    path.write_text(text)
    tables = load_from(tmp_path)
    assert tables.torch["2.9.1"].variants["12.9"].nccl == "2.27.5"
    new = tables.torch["2.15.0"]
    assert new.pypi_default == "13.0" and new.variants["13.0"].cudnn == "9.25.0.1" and new.torchvision is None


def test_pip_report_command_line():
    seen = {}

    def runner(cmd, **kw):
        seen["cmd"] = cmd
        out = cmd[cmd.index("--report") + 1]
        with open(out, "w") as fh:
            json.dump(R291, fh)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    assert rf.pip_report("2.9.1", runner=runner) == R291
    cmd = seen["cmd"]
    for part in ("--dry-run", "--no-deps", "--ignore-installed", "torch==2.9.1", "--only-binary=:all:",
                 "manylinux_2_28_x86_64", "--target"):
        assert part in cmd
    assert cmd[cmd.index("--python-version") + 1] == "3.12"


def test_pip_failure_is_reported():
    def runner(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for torch==9.9\n")

    with pytest.raises(Exception, match="No matching distribution"):
        rf.pip_report("9.9", runner=runner)


def test_refresh_command_prints_diff_without_writing(monkeypatch, tmp_path):
    path = _copy_data(tmp_path)
    monkeypatch.setattr("imagebuild.commands.refresh.data_path", lambda name: tmp_path / name)
    changed = report("2.9.1", ["nvidia-cuda-runtime-cu12==12.8.90", "nvidia-cudnn-cu12==9.11.0.1",
                               "nvidia-nccl-cu12==2.27.5", "triton==3.5.1"], "torch-2.9.1-x.whl")
    monkeypatch.setattr(rf, "pip_report", lambda version, **kw: changed)
    before = path.read_text()
    result = CliRunner().invoke(cli, ["refresh", "--torch", "2.9.1"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["2.9.1 cu128: cudnn 9.10.2.21 → 9.11.0.1",
                                          "1 release read, 1 change (run with --write to apply)"]
    assert path.read_text() == before
    result = CliRunner().invoke(cli, ["refresh", "--torch", "2.9.1", "--write"])
    assert "written to" in result.output
    assert load_from(tmp_path).torch["2.9.1"].variants["12.8"].cudnn == "9.11.0.1"
