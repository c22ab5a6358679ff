"""The compatibility data is internally consistent and carries the BRIEF.md §2 facts."""

from pathlib import Path

import pytest
import yaml

from imagebuild.compat import arch_num, cuda_tag, load, load_from, vtuple
from imagebuild.compat.tables import data_path

TABLES = load()


def test_load_is_cached():
    assert load() is TABLES


def test_vtuple_and_tags():
    assert vtuple("9.10.2.21") > vtuple("9.9.1") and vtuple("2.10.0") > vtuple("2.9.1")
    assert cuda_tag("12.8") == "cu128" and cuda_tag("13.0") == "cu130" and cuda_tag("cpu") == "cpu"
    assert arch_num("sm_90") == 90 and arch_num("sm_100a") == 100


@pytest.mark.parametrize("version", sorted(TABLES.torch))
def test_every_release_is_consistent(version):
    rel = TABLES.torch[version]
    assert rel.pypi_default in rel.variants
    assert vtuple(rel.python[0]) <= vtuple(rel.python[1])
    for cuda, v in rel.variants.items():
        if cuda == "cpu":
            assert v.cudnn is None and v.nccl is None and v.archs == ()
            continue
        assert cuda in TABLES.cuda, f"{version}: CUDA {cuda} missing from cuda.yaml"
        assert v.cudnn and v.nccl and v.triton
        assert {"sm_80", "sm_90"} <= set(v.archs), "BRIEF: every variant carries sm_80 and sm_90"


@pytest.mark.parametrize("version, cuda, cudnn, nccl, triton", [
    ("2.7.1", "12.6", "9.5.1.17", "2.26.2", "3.3.1"),
    ("2.8.0", "12.8", "9.10.2.21", "2.27.3", "3.4.0"),
    ("2.9.1", "12.8", "9.10.2.21", "2.27.5", "3.5.1"),
    ("2.9.1", "13.0", "9.13.0.50", "2.27.7", "3.5.1"),
    ("2.10.0", "12.8", "9.10.2.21", "2.27.5", "3.6.0"),
    ("2.11.0", "13.0", "9.19.0.56", "2.28.9", "3.6.0"),
])
def test_brief_facts(version, cuda, cudnn, nccl, triton):
    v = TABLES.torch[version].variants[cuda]
    assert (v.cudnn, v.nccl, v.triton) == (cudnn, nccl, triton)
    assert v.confirmed


def test_pypi_defaults_and_python_ranges():
    assert {v: TABLES.torch[v].pypi_default for v in ("2.7.1", "2.8.0", "2.9.1", "2.11.0", "2.13.0")} == {
        "2.7.1": "12.6", "2.8.0": "12.8", "2.9.1": "12.8", "2.11.0": "13.0", "2.13.0": "13.0"}
    assert TABLES.torch["2.9.1"].python == ("3.10", "3.14")
    assert TABLES.torch["2.13.0"].pythons()[0] == "3.10" and "cpu" in TABLES.torch["2.13.0"].variants


def test_arch_facts():
    assert "sm_100" not in TABLES.torch["2.9.1"].variants["12.6"].archs  # cu126 lacks Blackwell
    assert "sm_70" not in TABLES.torch["2.11.0"].variants["12.8"].archs  # cu128 from 2.11 drops Volta
    assert all("sm_70" not in TABLES.cuda[c].archs for c in TABLES.cuda if c.startswith("13."))


def test_min_driver():
    assert all(vtuple(c.min_driver)[0] >= 525 for v, c in TABLES.cuda.items() if v.startswith("12."))
    assert all(vtuple(c.min_driver)[0] >= 580 for v, c in TABLES.cuda.items() if v.startswith("13."))


def test_os_rows():
    assert {"debian12", "debian13", "ubuntu22.04", "ubuntu24.04"} <= set(TABLES.os)
    assert TABLES.os["debian12"].installable_pythons == ()  # Debian cannot add Pythons
    assert TABLES.os["debian12"].system_python == "3.11" and TABLES.os["ubuntu24.04"].system_python == "3.12"
    assert "3.12" in TABLES.os["ubuntu22.04"].installable_pythons


def test_transformer_engine_rows():
    te = TABLES.te["2.9.0"]
    assert (te.cuda_min, te.cudnn_min, te.fp8_min_arch, te.min_arch) == ("12.1", "9.3", "sm_89", "sm_80")
    assert TABLES.te["2.12.0"].cudart_dirs == ("cu13", "cudart", "cuda_cudart")


def test_unconfirmed_facts_are_marked():
    """Every data row says whether it is confirmed, so nobody mistakes a guess for wheel metadata."""
    for name in ("torch.yaml", "cuda.yaml", "os.yaml"):
        raw = yaml.safe_load(data_path(name).read_text())
        rows = ([v for r in raw["releases"].values() for v in r["variants"].values()] if name == "torch.yaml"
                else list(raw[name.split(".")[0]].values()))
        assert all("confirmed" in row for row in rows), name


def test_load_from_a_copy(tmp_path):
    for name in ("torch.yaml", "cuda.yaml", "os.yaml", "transformer_engine.yaml", "platforms.yaml"):
        (tmp_path / name).write_text(data_path(name).read_text())
    assert load_from(Path(tmp_path)).torch.keys() == TABLES.torch.keys()


def test_accel_and_cuda_tag_name_cpu_and_cuda_once():
    from imagebuild.compat import accel, cuda_tag

    assert [accel(c) for c in ("cpu", "12.8", "13.0")] == ["cpu", "cuda12.8", "cuda13.0"]
    assert [cuda_tag(c) for c in ("cpu", "12.8", "13.0")] == ["cpu", "cu128", "cu130"]


def test_platform_facts_are_read_and_marked():
    """arm64 is known (Debian arch, binfmt name, GPUs from sm_90); a release without an `arm64:` line has none."""
    raw = yaml.safe_load(data_path("platforms.yaml").read_text())
    assert all("confirmed" in row for row in raw["platforms"].values())
    arm = TABLES.platforms["linux/arm64"]
    assert (arm.deb_arch, arm.uname, arm.gpu_arch_min, arm.compile_native_only) == ("arm64", "aarch64", "sm_90", True)
    assert TABLES.default_platform == "linux/amd64"
    assert TABLES.torch["2.9.1"].platform_wheels["linux/arm64"].pypi == "cpu"
    assert TABLES.torch["2.13.0"].platform_wheels["linux/arm64"].pypi == "13.0"
    assert "linux/arm64" not in TABLES.torch["2.7.1"].platform_wheels
    assert TABLES.os["ubuntu24.04"].ports_mirror == "http://ports.ubuntu.com/ubuntu-ports"
    assert TABLES.os["debian12"].ports_mirror is None
