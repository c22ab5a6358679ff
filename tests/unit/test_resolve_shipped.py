"""Every shipped matrix resolves; `imagebuild validate` prints its summary; 500 generated variants resolve (their speed: bench/bench_resolve.py)."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from imagebuild.cli import cli
from imagebuild.compat import load
from imagebuild.matrix import load_matrix, parse_matrix
from imagebuild.resolve import resolve_matrix

IMAGES = Path(__file__).resolve().parents[2] / "images"
SHIPPED = sorted(p.name for p in IMAGES.glob("*.yaml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_matrix_resolves(name):
    variants = resolve_matrix(load_matrix(IMAGES / name))
    assert variants
    for v in variants:
        assert v.versions.torch and v.versions.python and v.os.id == v.versions.os
        if v.versions.cuda != "cpu":
            assert v.versions.cudnn and v.versions.nccl and v.versions.triton and v.min_driver
            assert set(v.gpu_archs) <= set(v.arch_list)


def test_h100():
    variants = resolve_matrix(load_matrix(IMAGES / "h100.yaml"))
    assert [v.key for v in variants] == ["2.7.1-cuda12.8-py3.12-ubuntu24.04", "2.9.1-cuda12.8-py3.12-ubuntu24.04",
                                         "2.9.1-cuda13.0-py3.12-ubuntu24.04"]
    te = {(v.versions.torch, v.versions.cuda): v.versions.transformer_engine for v in variants}
    assert te == {("2.7.1", "12.8"): "2.10.0", ("2.9.1", "12.8"): "2.10.0", ("2.9.1", "13.0"): "2.12.0"}
    assert all(v.fp8_min_arch == "sm_89" for v in variants)
    assert variants[1].versions.cudnn == "9.10.2.21" and variants[1].torch_index_url is None
    assert variants[2].torch_index_url == "https://download.pytorch.org/whl/cu130"
    assert variants[0].registry == "registry.example.internal:5000/ml" and variants[0].perf_min == {"bf16_tflops": 600}


def test_a100_shows_its_choice():
    variants = resolve_matrix(load_matrix(IMAGES / "a100.yaml"))
    assert [v.key for v in variants] == ["2.8.0-cuda12.8-py3.10-ubuntu22.04", "2.9.1-cuda12.6-py3.10-ubuntu22.04",
                                         "2.9.1-cuda12.8-py3.10-ubuntu22.04"]
    assert variants[1].chosen["torch"] == "2.9 → 2.9.1 (newest known patch)"


def test_cpu_matrix_is_the_ci_build():
    [v] = resolve_matrix(load_matrix(IMAGES / "cpu.yaml"))
    assert v.key == "2.13.0-cpu-py3.11-debian12"
    assert v.base.kind == "bootstrap" and v.flavors == ("base", "runtime", "dev")
    assert (v.versions.torchvision, v.versions.torchaudio, v.versions.transformer_engine) == (None, None, None)
    assert v.torch_index_url == "https://download.pytorch.org/whl/cpu"


def test_validate_command(monkeypatch):
    monkeypatch.chdir(IMAGES.parent)
    result = CliRunner().invoke(cli, ["validate", "--matrix", "h100.yaml"])
    assert result.exit_code == 0, result.output
    assert result.output == "images/h100.yaml: valid — 3 variants, 9 images\n"


def test_validate_command_verbose_shows_choices(monkeypatch):
    monkeypatch.chdir(IMAGES.parent)
    result = CliRunner().invoke(cli, ["validate", "-v", "--matrix", "a100"])
    assert "torch: 2.9 → 2.9.1 (newest known patch)" in result.output


def test_validate_command_bad_matrix_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: p\nmatrix: {torch: ['2.9.1'], cuda: ['12.8'], os: [ubuntu24.4]}\n")
    result = CliRunner().invoke(cli, ["validate", "--matrix", str(bad)], standalone_mode=False)
    assert result.exception is not None and result.exception.exit_code == 2
    assert "bad.yaml:2: matrix.os[0]: unknown OS 'ubuntu24.4'" in str(result.exception)


def _generated(n: int) -> str:
    tables = load()
    rows = []
    for rel in tables.torch.values():
        for cuda in rel.variants:
            for py in rel.pythons():
                for o in tables.os.values():
                    if py == o.system_python or py in o.installable_pythons:
                        rows.append(f'  - {{torch: "{rel.version}", cuda: "{cuda}", python: "{py}", os: {o.id}}}')
    assert len(rows) >= n
    return "name: p\ninclude:\n" + "\n".join(rows[:n]) + "\n"


def test_500_variants_resolve():
    """Every generated variant resolves (the speed goal is a bench row: bench/bench_resolve.py, not a timed test)."""
    variants = resolve_matrix(parse_matrix(_generated(500), "m.yaml"))
    assert len(variants) == 500
