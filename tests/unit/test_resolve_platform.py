"""Python/OS, GPU archs, transformer_engine and base image rules."""

import pytest

from imagebuild.errors import MatrixError
from imagebuild.matrix import parse_matrix
from imagebuild.resolve import resolve_matrix
from imagebuild.resolve.platform import runs_natively


def resolve(row: str, archs: str = "[sm_90]"):
    head = f"name: pytorch\ngpu_archs: {archs}\n"
    return resolve_matrix(parse_matrix(head + "include:\n  - " + row + "\n", "m.yaml"))


def problems(row: str, archs: str = "[sm_90]") -> list[str]:
    with pytest.raises(MatrixError) as err:
        resolve(row, archs)
    return [str(p) for p in err.value.problems]


def test_python_outside_torch_range():
    [p] = problems('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, python: "3.9"}')
    assert p == ("m.yaml:4: include[0].python: torch 2.9.1 ships wheels for Python 3.10–3.14, not 3.9; "
                 "valid choices: 3.10, 3.11, 3.12, 3.13, 3.14")


def test_debian_cannot_install_another_python():
    [p] = problems('{torch: "2.9.1", cuda: "12.8", os: debian12, python: "3.12"}')
    assert p == ("m.yaml:4: include[0].python: debian12 ships Python 3.11 and cannot install another (Debian has no "
                 "deadsnakes-style archive); valid choices on debian12: 3.11; or an OS with Python 3.12: "
                 "ubuntu22.04, ubuntu24.04")


def test_ubuntu_installs_python_from_deadsnakes():
    [v] = resolve('{torch: "2.9.1", cuda: "12.8", os: ubuntu22.04, python: "3.12"}')
    assert v.versions.python == "3.12"
    assert v.chosen["python"] == "3.12 from deadsnakes (ubuntu22.04 ships 3.10)"


def test_default_python_is_the_os_one_and_must_fit_torch():
    [v] = resolve('{torch: "2.9.1", cuda: "12.8", os: debian13}')
    assert v.versions.python == "3.13" and v.chosen["python"] == "3.13 (the debian13 python3)"
    [p] = problems('{torch: "2.5.1", cuda: "12.4", os: debian13}')
    assert p.startswith("m.yaml:4: include[0].os: torch 2.5.1 ships wheels for Python 3.9–3.12, not 3.13")


@pytest.mark.parametrize("arch, archs, ok", [
    ("sm_90", ("sm_80", "sm_90"), True),
    ("sm_89", ("sm_80", "sm_86", "sm_90"), True),  # sm_86 SASS runs on sm_89
    ("sm_100", ("sm_80", "sm_90"), False),
    ("sm_103", ("sm_100", "sm_120"), True),
    ("sm_70", ("sm_75", "sm_80"), False),
])
def test_runs_natively(arch, archs, ok):
    assert runs_natively(arch, archs) is ok


def test_gpu_arch_missing_from_wheel_names_variants_that_have_it():
    [p] = problems('{torch: "2.9.1", cuda: "12.6", os: ubuntu24.04}', "[sm_90, sm_100]")
    assert p == ("m.yaml:2: gpu_archs[1]: torch 2.9.1 cu126 wheels carry no sm_100 code (they have sm_50, sm_60, "
                 "sm_70, sm_75, sm_80, sm_86, sm_90); CUDA variants of torch 2.9.1 with sm_100: 12.8, 13.0")


def test_cpu_variant_with_gpu_archs():
    [p] = problems('{torch: "2.13.0", cuda: cpu, os: debian12}')
    assert p.startswith("m.yaml:4: include[0].cuda: a CPU variant carries no GPU code, but gpu_archs asks for sm_90")


def test_te_resolves_and_records_fp8_arch():
    [v] = resolve('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, transformer_engine: "2.10"}')
    assert v.versions.transformer_engine == "2.10.0" and v.fp8_min_arch == "sm_89"
    assert v.chosen["transformer_engine"] == "2.10 → 2.10.0 (newest known patch)"


def test_te_on_a100_runs_without_fp8():
    [v] = resolve('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, transformer_engine: "2.10.0"}', "[sm_80]")
    assert v.versions.transformer_engine == "2.10.0"
    assert v.chosen["transformer_engine"] == "2.10.0; FP8 needs sm_89+, so sm_80 run it without FP8"


def test_te_below_its_min_arch():
    [p] = problems('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, transformer_engine: "2.10"}', "[sm_75]")
    assert "transformer_engine 2.10.0 needs sm_80+, gpu_archs has sm_75" in p
    assert p.endswith("no known transformer_engine release fits this variant; set transformer_engine: false")


def test_te_needs_cuda_121_and_cudnn_93():
    found = problems('{torch: "2.6.0", cuda: "11.8", os: ubuntu24.04, transformer_engine: "2.9"}', "[sm_80]")
    assert any("needs CUDA >= 12.1, this variant is CUDA 11.8" in p for p in found)
    assert any("needs cuDNN >= 9.3, torch 2.6.0 cu118 pins cuDNN 9.1.0.70" in p for p in found)


def test_te_on_cpu_rejected():
    [p] = problems('{torch: "2.13.0", cuda: cpu, os: debian12, transformer_engine: "2.9"}', "[]")
    assert p == ("m.yaml:4: include[0].transformer_engine: transformer_engine needs CUDA; this is a CPU variant; "
                 "set transformer_engine: false for CPU variants")


def test_te_loader_layout_mismatch():
    [p] = problems('{torch: "2.10.0", cuda: "12.8", os: ubuntu24.04, transformer_engine: "2.12"}')
    assert "looks for libcudart in nvidia/{cu13,cudart,cuda_cudart}, but CUDA 12.8 wheels install it in " \
           "nvidia/cuda_runtime" in p
    [v] = resolve('{torch: "2.10.0", cuda: "13.0", os: ubuntu24.04, transformer_engine: "2.12"}')
    assert v.versions.transformer_engine == "2.12.0"


def test_unknown_te_release():
    [p] = problems('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, transformer_engine: "1.9"}')
    assert "unknown transformer_engine release 1.9; known transformer_engine releases: 2.8.0" in p


def test_known_bad_te_is_rejected_with_the_reason_and_what_fits():
    [p] = problems('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, transformer_engine: "2.9"}')
    assert "transformer_engine 2.9.0 cannot be used: measured: the sdist compiled" in p and "failed packaging" in p
    assert p.endswith("transformer_engine releases that fit torch 2.9.1 + CUDA 12.8: 2.10.0")
    found = problems('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, transformer_engine: "2.20"}')
    assert any("2.20.2 needs cuDNN >= 9.12, torch 2.9.1 cu128 pins cuDNN 9.10.2.21" in f for f in found)
    assert any("libnccl.so.2" in f for f in found)


def test_defaults_fit_the_founding_stacks():
    for torch, cuda, te in (("2.7.1", "12.8", "2.10"), ("2.9.1", "12.8", "2.10"), ("2.9.1", "13.0", "2.12")):
        [v] = resolve(f'{{torch: "{torch}", cuda: "{cuda}", os: ubuntu24.04, python: "3.12", '
                      f'transformer_engine: "{te}"}}')
        assert v.versions.transformer_engine == f"{te}.0"


def test_default_base_is_the_official_os_image():
    [v] = resolve('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04}')
    assert (v.base.kind, v.base.ref) == ("registry", "ubuntu:24.04")
    assert "pin a digest" in v.chosen["base_image"]


def test_bootstrap_base_defaults_to_os_mirror():
    [v] = resolve('{torch: "2.13.0", cuda: cpu, os: debian12, base_image: bootstrap}', "[]")
    assert v.base.kind == "bootstrap" and v.base.mirror == "http://deb.debian.org/debian" and v.base.ref is None


@pytest.mark.parametrize("ref, reason", [
    ("nvidia/cuda:12.8.1-runtime-ubuntu24.04", "ships CUDA libraries that torch's nvidia-* wheels install again"),
    ("nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04", "two copies of each library"),
    ("nvidia/cuda:12.6.3-base-ubuntu24.04", "is CUDA 12.6, the variant is CUDA 12.8"),
    ("nvidia/cuda:12.8.1-base-ubuntu22.04", "is ubuntu22.04, the variant's os is ubuntu24.04"),
    ("debian:12", "is not ubuntu24.04, the variant's os"),
])
def test_registry_base_checks(ref, reason):
    [p] = problems(f'{{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, base_image: "{ref}"}}')
    assert reason in p and "include[0].base_image" in p


def test_nvidia_cuda_base_tag_accepted():
    [v] = resolve('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, base_image: "nvidia/cuda:12.8.1-base-ubuntu24.04"}')
    assert v.base.ref == "nvidia/cuda:12.8.1-base-ubuntu24.04"


def test_bootstrap_fields_need_bootstrap():
    [p] = problems('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, snapshot: "20251101T000000Z"}')
    assert p.startswith("m.yaml:4: include[0].snapshot: snapshot only applies to base_image: bootstrap")


def test_bootstrap_of_an_os_without_pinned_keys_is_bad_input():
    """A suite whose archive keys are not in the data cannot be bootstrapped: exit 2 before anything builds."""
    import dataclasses

    from imagebuild.compat import load

    tables = load()
    unkeyed = dataclasses.replace(tables, os={**tables.os, "ubuntu24.04": dataclasses.replace(
        tables.os["ubuntu24.04"], archive_keys=())})
    doc = parse_matrix('name: pytorch\ngpu_archs: [sm_90]\ninclude:\n  - {torch: "2.9.1", cuda: "12.8", '
                       'os: ubuntu24.04, base_image: bootstrap}\n', "m.yaml")
    with pytest.raises(MatrixError) as err:
        resolve_matrix(doc, tables=unkeyed)
    [p] = [str(p) for p in err.value.problems]
    assert p.startswith("m.yaml:4: include[0].base_image: ubuntu24.04 has no archive key fingerprints")
    assert p.endswith("OSes that bootstrap: debian12, debian13, ubuntu22.04; or a registry base_image")
    assert err.value.exit_code == 2
