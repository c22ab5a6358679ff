"""Platforms: one variant per platform of a row, each with the wheels that exist for it (resolve/machine.py)."""

import pytest

from imagebuild.errors import MatrixError
from imagebuild.inputs import BuildInputs
from imagebuild.matrix import parse_matrix
from imagebuild.plan import plan_from_variants
from imagebuild.resolve import resolve_matrix


def resolve(row: str, archs: str = "[sm_90]"):
    head = f"name: pytorch\ngpu_archs: {archs}\n"
    return resolve_matrix(parse_matrix(head + "include:\n  - " + row + "\n", "m.yaml"))


def problems(row: str, archs: str = "[sm_90]") -> list[str]:
    with pytest.raises(MatrixError) as err:
        resolve(row, archs)
    return [str(p) for p in err.value.problems]


GH200 = '{torch: "2.13.0", cuda: "13.0", os: ubuntu24.04, python: "3.12", transformer_engine: false'


def test_no_platforms_is_amd64_with_the_key_and_tag_as_before():
    [v] = resolve(GH200 + "}")
    assert (v.platform, v.key) == ("linux/amd64", "2.13.0-cuda13.0-py3.12-ubuntu24.04")


def test_two_platforms_give_two_variants_from_pypi():
    amd, arm = resolve(GH200 + ", base_image: bootstrap, platforms: [linux/amd64, arm64]}")
    assert (amd.platform, arm.platform) == ("linux/amd64", "linux/arm64")
    assert arm.key == "2.13.0-cuda13.0-py3.12-ubuntu24.04-arm64"
    assert amd.torch_index_url is None and arm.torch_index_url is None  # CUDA 13 aarch64 from PyPI
    assert arm.base.mirror == "http://ports.ubuntu.com/ubuntu-ports"  # Ubuntu's arm64 archive
    assert amd.base.mirror == "http://archive.ubuntu.com/ubuntu"


def test_arm64_cuda_from_the_pytorch_index_when_pypi_is_cpu_only():
    amd, arm = resolve('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, python: "3.12", platforms: [amd64, arm64]}')
    assert amd.torch_index_url is None
    assert arm.torch_index_url == "https://download.pytorch.org/whl/cu128"
    assert "CPU-only" in arm.chosen["torch index (linux/arm64)"]
    assert arm.arch_list == ("sm_80", "sm_90", "sm_100", "sm_120")  # torch.yaml's arm64 cu128 list


def test_arm64_from_pypi_alone_is_a_line_error_with_the_choices():
    [p] = problems('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, python: "3.12", torch_index_url: none, '
                   'platforms: [linux/arm64]}')
    assert p.startswith("m.yaml:4: include[0].platforms: torch 2.9.1's linux/arm64 wheel on PyPI is CPU-only: CUDA "
                        "12.8 for linux/arm64 is not on PyPI (torch_index_url none); valid choices for linux/arm64 "
                        "from PyPI alone: cuda: cpu")
    assert "https://download.pytorch.org/whl/cu128" in p


def test_a_cuda_the_platform_lacks_names_the_valid_ones():
    [p] = problems('{torch: "2.9.1", cuda: "12.6", os: ubuntu24.04, python: "3.12", platforms: [arm64]}')
    assert "torch 2.9.1 has no CUDA 12.6 wheels for linux/arm64" in p
    assert p.endswith("valid choices for linux/arm64: cuda: 12.8, 13.0, cpu; or drop linux/arm64 from platforms")


def test_a_release_without_arm64_facts_is_refused():
    [p] = problems('{torch: "2.7.1", cuda: "12.8", os: ubuntu24.04, python: "3.12", platforms: [arm64]}')
    assert "torch 2.7.1 has no known linux/arm64 wheels" in p and "2.9.1, 2.13.0" in p


def test_arm64_gpus_start_at_sm_90():
    [p] = problems(GH200 + ", platforms: [arm64]}", archs="[sm_80, sm_90]")
    assert p.startswith("m.yaml:2: gpu_archs[0]: sm_80 GPUs do not come with linux/arm64 hosts (they start at sm_90")
    assert resolve(GH200 + ", platforms: [arm64]}", archs="[sm_90]")


def test_bad_platform_values():
    assert "unknown platform 'arm65'; valid choices: linux/amd64, linux/arm64" in problems(GH200 + ", platforms: [arm65]}")[0]
    assert "listed twice" in problems(GH200 + ", platforms: [arm64, linux/arm64]}")[0]
    assert "non-empty list of platforms" in problems(GH200 + ", platforms: []}")[0]


def test_transformer_engine_on_arm64_is_planned_with_its_native_builder_note():
    amd, arm = resolve('{torch: "2.13.0", cuda: "13.0", os: ubuntu24.04, python: "3.12", '
                       'transformer_engine: "2.12", platforms: [amd64, arm64]}')
    assert amd.versions.transformer_engine == arm.versions.transformer_engine == "2.12.0"
    assert "native linux/arm64 builder" in arm.chosen["transformer_engine (linux/arm64)"]
    assert not any("linux/arm64" in k for k in amd.chosen)


def test_plan_tags_ids_and_hashes_per_platform():
    variants = resolve('{torch: "2.13.0", cuda: cpu, os: debian12, python: "3.11", flavors: [base], '
                       'platforms: [amd64, arm64], base_image: bootstrap}', archs="[]")
    amd, arm = plan_from_variants(variants, BuildInputs()).images
    assert amd.short_tag == "2.13.0-cpu-py3.11-debian12-base" and amd.id == "2.13.0-cpu-py3.11-debian12-base"
    assert arm.short_tag == "2.13.0-cpu-py3.11-debian12-arm64-base"
    assert arm.inputs_hash != amd.inputs_hash  # same Dockerfile, another platform: another image
    [alone] = plan_from_variants(resolve('{torch: "2.13.0", cuda: cpu, os: debian12, python: "3.11", '
                                         'flavors: [base], base_image: bootstrap}', archs="[]"), BuildInputs()).images
    assert alone.inputs_hash == amd.inputs_hash  # the default platform's hash is as before platforms existed


def test_arm64_te_wheel_targets_its_gpus_and_has_its_own_key():
    from imagebuild.render.te_wheel import render_te_wheel

    amd, arm = resolve('{torch: "2.13.0", cuda: "13.0", os: ubuntu24.04, python: "3.12", '
                       'transformer_engine: "2.12", platforms: [amd64, arm64]}')
    amd_te, arm_te = render_te_wheel(amd), render_te_wheel(arm)
    assert "NVTE_CUDA_ARCHS" not in amd_te.dockerfile  # the amd64 Dockerfile as before
    assert "ENV NVTE_CUDA_ARCHS=90;100;110;120" in arm_te.dockerfile
    assert amd_te.labels != arm_te.labels  # the build key knows the platform


def test_arm64_dev_image_takes_nvidia_repository_sbsa():
    from imagebuild.render import render_image

    amd, arm = resolve('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, python: "3.12", '
                       'platforms: [amd64, arm64]}')
    assert "/ubuntu2404/x86_64/" in render_image(amd, "dev", BuildInputs()).dockerfile
    assert "/ubuntu2404/sbsa/" in render_image(arm, "dev", BuildInputs()).dockerfile
