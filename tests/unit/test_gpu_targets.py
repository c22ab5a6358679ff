"""Target GPUs (`gpus:`): the data (compat/data/gpus.yaml), validate's refusals (one problem at FILE:LINE with the
choices; a good pair passes), the family defaults, and the labels an image gets (io.imagebuild.gpus, min-driver)."""

from __future__ import annotations

import pytest

from imagebuild.compat import load as load_tables
from imagebuild.compat.gpus import cc_of, load, name_of
from imagebuild.errors import MatrixError
from imagebuild.matrix import parse_matrix
from imagebuild.models import FLAVORS
from imagebuild.render.hardware import forward_compat, hardware_labels
from imagebuild.resolve import resolve_matrix
from imagebuild.resolve.platform import runs_natively

HEAD = 'name: pytorch\ndefaults: {os: ubuntu24.04, python: "3.12"}\n'


def resolve(text: str):
    return resolve_matrix(parse_matrix(text, "m.yaml"))


def problems(text: str) -> list[str]:
    with pytest.raises(MatrixError) as err:
        resolve(text)
    return [str(p) for p in err.value.problems]


# -- the data -------------------------------------------------------------------------------------------------------

def test_compute_capabilities_of_the_brief():
    data = load()
    want = {"a100": "8.0", "a10": "8.6", "a40": "8.6", "l4": "8.9", "l40s": "8.9", "h100": "9.0", "h200": "9.0",
            "gh200": "9.0", "b200": "10.0", "gb200": "10.0", "b300": "10.3", "rtx-pro-6000": "12.0",
            "rtx-5090": "12.0"}
    assert {name: data.gpus[name].cc for name in want} == want
    assert data.gpus["gh200"].platform == data.gpus["gb200"].platform == "linux/arm64"
    assert data.gpus["b300"].confirmed is False  # not stated in BRIEF.md: best public knowledge
    assert data.gpus["rtx-pro-6000"].arch == "sm_120" and data.gpus["b300"].arch == "sm_103"


def test_every_gpu_arch_has_a_toolkit_range():
    data = load()
    for gpu in data.gpus.values():
        assert data.arch_range(gpu.arch) is not None, gpu.name


def test_toolkit_ranges():
    data = load()
    assert not data.arch_range("sm_120").allows("12.6") and data.arch_range("sm_120").allows("12.8")
    assert not data.arch_range("sm_100").allows("12.6") and data.arch_range("sm_100").allows("13.0")
    assert not data.arch_range("sm_103").allows("12.8") and data.arch_range("sm_103").allows("12.9")
    assert data.arch_range("sm_70").allows("12.9") and not data.arch_range("sm_70").allows("13.0")  # CUDA 13 drops
    assert data.arch_range("sm_90a") is data.arch_range("sm_90")


def test_every_family_default_fits_its_family():
    """A default never makes an error: each GPU of a family is on its platform, its CUDA compiles for it, and every
    CUDA the data knows from the family's floor has it in the wheels' default arch list."""
    data, tables = load(), load_tables()
    for fam in data.defaults:
        for name in fam.gpus:
            gpu = data.gpus[name]
            assert gpu.platform == fam.platform, (fam.family, name)
            for cuda, info in tables.cuda.items():
                if data.family(cuda, fam.platform) is fam:
                    assert data.arch_range(gpu.arch).allows(cuda), (fam.family, name, cuda)
                    assert runs_natively(gpu.arch, info.archs), (fam.family, name, cuda)


def test_names_and_compute_capability_spelling():
    assert name_of(" RTX PRO_6000 ") == "rtx-pro-6000"
    assert load().lookup("DGX Spark").name == "gb10"
    assert (cc_of("sm_90"), cc_of("sm_90a"), cc_of("sm_103")) == ("9.0", "9.0a", "10.3")


# -- validate -------------------------------------------------------------------------------------------------------

def test_good_pair_passes_and_labels_the_image():
    [v] = resolve(HEAD + 'gpus: [H100, rtx-pro-6000]\nmatrix: {torch: ["2.9.1"], cuda: ["12.8"]}\n')
    assert v.gpus == (("h100", "9.0"), ("rtx-pro-6000", "12.0"))
    assert v.gpu_archs == ("sm_90", "sm_120")  # named GPUs must run natively: the smoke suite and TE key see them
    labels = hardware_labels(v, "runtime")
    assert labels == {"io.imagebuild.gpus": "h100=9.0,rtx-pro-6000=12.0", "io.imagebuild.min-driver": "525.60.13"}


def test_cuda_12_6_for_sm_120_is_one_error_with_line_and_choices():
    [p] = problems(HEAD + 'gpus: [h100, rtx-pro-6000]\nmatrix: {torch: ["2.9.1"], cuda: ["12.6", "12.8"]}\n')
    assert p == ("m.yaml:3: gpus[1]: rtx-pro-6000 (sm_120) needs CUDA >= 12.8; this variant is CUDA 12.6 "
                 "(compat/data/gpus.yaml); CUDA variants of torch 2.9.1 that target sm_120: 12.8, 13.0")


def test_cuda_13_drops_volta_at_the_rows_own_line():
    [p] = problems(HEAD + 'include:\n  - {torch: "2.9.1", cuda: "13.0", gpus: [v100]}\n')
    assert p.startswith("m.yaml:4: include[0].gpus[0]: v100 (sm_70) needs CUDA 9.0–12.9; this variant is CUDA 13.0")
    assert p.endswith("CUDA variants of torch 2.9.1 that target sm_70: 12.6, 12.8")


def test_unknown_gpu_has_a_did_you_mean():
    [p] = problems(HEAD.replace('python: "3.12"}', 'python: "3.12", gpus: [h100, b20O]}')
                   + 'matrix: {torch: ["2.9.1"], cuda: ["12.8"]}\n')
    assert p.startswith("m.yaml:2: defaults.gpus[1]: unknown GPU 'b20O'; did you mean 'b200'? (valid choices: ")
    [p] = problems(HEAD + 'gpus: [sm_99]\nmatrix: {torch: ["2.9.1"], cuda: ["12.8"]}\n')
    assert p.startswith("m.yaml:3: gpus[0]: unknown GPU arch 'sm_99'")
    [p] = problems(HEAD + 'gpus: [h100, H100]\nmatrix: {torch: ["2.9.1"], cuda: ["12.8"]}\n')
    assert p == "m.yaml:3: gpus[1]: GPU 'h100' is listed twice"


def test_a_gpu_of_another_host_architecture():
    [p] = problems(HEAD + 'gpus: [gh200]\nmatrix: {torch: ["2.9.1"], cuda: ["12.8"]}\n')
    assert p == ("m.yaml:3: gpus[0]: gh200 comes with linux/arm64 hosts; this row builds linux/amd64 only; "
                 "add linux/arm64 to platforms, or name h100, h200, h20")


def test_a_cpu_row_needs_an_empty_list():
    text = HEAD + 'gpus: [h100]\nmatrix: {torch: ["2.9.1"], cuda: ["12.8", "cpu"]}\n'
    [p] = problems(text)
    assert p.startswith("m.yaml:3: gpus: a CPU variant carries no GPU code, but gpus names h100")
    ok = resolve(text + 'include:\n  - {torch: "2.9.1", cuda: "12.6", gpus: []}\n'
                 'exclude:\n  - {cuda: cpu}\n')
    assert [v.gpus for v in ok] == [(("h100", "9.0"),), ()]


def test_each_platform_gets_its_own_gpus():
    amd, arm = resolve('name: pytorch\ngpus: [gh200, h100]\ndefaults: {os: ubuntu24.04, python: "3.12", '
                       'platforms: [linux/amd64, linux/arm64]}\nmatrix: {torch: ["2.13.0"], cuda: ["13.0"]}\n')
    assert (amd.platform, amd.gpus) == ("linux/amd64", (("h100", "9.0"),))
    assert (arm.platform, arm.gpus) == ("linux/arm64", (("gh200", "9.0"),))
    assert amd.gpu_archs == arm.gpu_archs == ("sm_90",)


# -- defaults and labels ----------------------------------------------------------------------------------------------

def test_family_default_labels_but_does_not_demand():
    old, new = resolve(HEAD + 'matrix: {torch: ["2.9.1"], cuda: ["12.6", "12.8"]}\n')
    assert [n for n, _ in old.gpus] == ["a100", "h100", "h200"]
    assert [n for n, _ in new.gpus] == ["a100", "h100", "h200", "b200", "rtx-pro-6000"]
    assert new.gpu_archs == () and "default of CUDA 12.8+ (amd64)" in new.chosen["gpus"]


def test_gpu_archs_alone_keeps_its_meaning():
    [v] = resolve(HEAD + 'gpu_archs: [sm_90]\nmatrix: {torch: ["2.9.1"], cuda: ["12.8"]}\n')
    assert v.gpus == () and v.gpu_archs == ("sm_90",)


def test_cpu_images_get_no_hardware_labels():
    [v] = resolve('name: p\ndefaults: {os: debian12, python: "3.11"}\nmatrix: {torch: ["2.13.0"], cuda: [cpu]}\n')
    assert all(hardware_labels(v, f) == {} for f in FLAVORS)


def test_forward_compat_only_when_shipped():
    [v] = resolve(HEAD + 'gpus: [h100]\nmatrix: {torch: ["2.9.1"], cuda: ["13.0"]}\n'
                  'include:\n  - {torch: "2.9.1", cuda: "12.8", apt_packages: {runtime: [cuda-compat-12-8]}}\n'
                  'exclude:\n  - {cuda: "13.0"}\n')
    assert forward_compat(v, "base") is None and "forward-compat" not in str(hardware_labels(v, "base"))
    dev = hardware_labels(v, "dev")
    assert dev["io.imagebuild.forward-compat"] == "cuda-compat-12-8 (apt_packages.runtime)"
    assert dev["io.imagebuild.forward-compat-min-driver"] == load().forward_compat[12][0]


def test_plan_json_and_report_rows_carry_them():
    from imagebuild.inputs import BuildInputs
    from imagebuild.models import ImageResult
    from imagebuild.plan import plan_from_variants
    from imagebuild.plan.output import plan_rows

    variants = resolve(HEAD + 'gpus: [b200, SM_90a]\nmatrix: {torch: ["2.9.1"], cuda: ["12.8"]}\n')
    plan = plan_from_variants(variants, BuildInputs(), matrix_file="m.yaml")
    rows = {r["flavor"]: r for r in plan_rows(plan)}
    assert rows["runtime"]["gpus"] == "b200=10.0,sm_90a=9.0a" and rows["runtime"]["min_driver"] == "525.60.13"
    assert rows["base"]["gpus"] is None and rows["base"]["min_driver"] == "525.60.13"
    result = ImageResult.of(next(i for i in plan.images if i.flavor == "dev"))
    assert (result.gpus, result.min_driver) == ("b200=10.0,sm_90a=9.0a", "525.60.13")
