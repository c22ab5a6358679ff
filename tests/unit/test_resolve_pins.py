"""Pins follow the torch wheel: release/patch choice, CUDA variants, cuDNN/NCCL rules, torchvision/torchaudio."""

import pytest

from imagebuild.errors import MatrixError
from imagebuild.inputs import BuildInputs
from imagebuild.matrix import parse_matrix
from imagebuild.resolve import resolve_matrix


def resolve(row: str, head: str = "name: pytorch\ngpu_archs: [sm_90]\n", inputs=None):
    return resolve_matrix(parse_matrix(head + "include:\n  - " + row + "\n", "m.yaml"), inputs or BuildInputs())


def problems(row: str, head: str = "name: pytorch\ngpu_archs: [sm_90]\n") -> list[str]:
    with pytest.raises(MatrixError) as err:
        resolve(row, head)
    return [str(p) for p in err.value.problems]


def test_291_cu128_fills_every_pin():
    [v] = resolve('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, python: "3.12"}')
    assert v.versions.as_dict() == {
        "torch": "2.9.1", "cuda": "12.8", "cudnn": "9.10.2.21", "nccl": "2.27.5", "triton": "3.5.1",
        "python": "3.12", "os": "ubuntu24.04", "torchvision": "0.24.1", "torchaudio": "2.9.1",
        "transformer_engine": None,
    }
    assert v.key == "2.9.1-cuda12.8-py3.12-ubuntu24.04"
    assert v.cuda_tag == "cu128" and v.torch_index_url is None  # PyPI's default variant
    assert v.min_driver.startswith("525") and "sm_90" in v.arch_list
    assert v.flavors == ("base", "runtime", "dev") and v.tf32 is True
    assert v.source.line == 4 and v.source.keypath == "include[0]"
    assert "pins" not in v.chosen  # confirmed from wheel metadata


def test_cu130_pins_and_index():
    [v] = resolve('{torch: "2.9.1", cuda: "13.0", os: ubuntu24.04}')
    assert (v.versions.cudnn, v.versions.nccl) == ("9.13.0.50", "2.27.7")
    assert v.torch_index_url == "https://download.pytorch.org/whl/cu130"
    assert v.min_driver.startswith("580")


def test_minor_resolves_to_newest_known_patch():
    [v] = resolve('{torch: "2.9", cuda: "12.8", os: ubuntu24.04}')
    assert v.versions.torch == "2.9.1"
    assert v.chosen["torch"] == "2.9 → 2.9.1 (newest known patch)"
    assert v.key == "2.9.1-cuda12.8-py3.12-ubuntu24.04"


def test_unknown_torch_release():
    [p] = problems('{torch: "2.9.7", cuda: "12.8", os: ubuntu24.04}')
    assert p.startswith("m.yaml:4: include[0].torch: unknown torch release 2.9.7; known torch 2.9 releases: "
                        "2.9.0, 2.9.1 (`imagebuild refresh --torch 2.9.7 --write`")


def test_torch_27_cuda_123_cudnn_89_says_which_variants_exist():
    found = problems('{torch: "2.7", cuda: "12.3", cudnn: "8.9", os: ubuntu24.04}')
    assert found == [
        "m.yaml:4: include[0].cuda: torch 2.7.1 has no CUDA 12.3 wheels; valid choices (the CUDA variants torch "
        "2.7.1 ships): 11.8, 12.6, 12.8, cpu",
        "m.yaml:4: include[0].cudnn: cuDNN 8.9 is incompatible with torch 2.7.1, whose wheels pin cuDNN 9.1.0.70 / "
        "9.5.1.17 / 9.7.1.26; valid choices: a cuDNN 9.x version, or leave cudnn unset",
    ]


@pytest.mark.parametrize("pin, expected, chosen", [
    ("9.10.2.21", "9.10.2.21", None),
    ("9.10", "9.10.2.21", "9.10 → 9.10.2.21 (the torch wheel's own pin)"),
    ("9", "9.10.2.21", "9 → 9.10.2.21 (the torch wheel's own pin)"),
])
def test_cudnn_pin_honoured(pin, expected, chosen):
    [v] = resolve(f'{{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, cudnn: "{pin}"}}')
    assert v.versions.cudnn == expected
    assert v.chosen.get("cudnn") == chosen


@pytest.mark.parametrize("pin", ["9.5.1.17", "9.13.0.50"])
def test_a_cudnn_pin_other_than_the_wheels_own_is_refused(pin):
    """Older or newer: the wheel requires exactly its own cuDNN, so pip installs no other; an image built anyway
    would carry 9.10.2.21 under a label naming the pin (the state would lie until its test failed it)."""
    [p] = problems(f'{{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, cudnn: "{pin}"}}')
    assert p == (f"m.yaml:4: include[0].cudnn: cuDNN {pin} is not the cuDNN torch 2.9.1 cu128's wheel pins: it "
                 "requires exactly 9.10.2.21, and pip installs no other cuDNN beside it; valid choices: 9.10.2.21 (or "
                 "a prefix of it), or leave cudnn unset")


def test_cudnn_pin_other_major_rejected():
    [p] = problems('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, cudnn: "8.9.7"}')
    assert "cuDNN 8.9.7 is incompatible with torch 2.9.1 cu128, whose wheel pins cuDNN 9.10.2.21 " \
           "(the major version must be 9)" in p


def test_nccl_pin_rules():
    [v] = resolve('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, nccl: "2.27"}')
    assert v.versions.nccl == "2.27.5" and v.chosen["nccl"] == "2.27 → 2.27.5 (the torch wheel's own pin)"
    # another NCCL: refused, naming the torch releases whose wheel for this CUDA pins it
    [p] = problems('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, nccl: "2.27.3"}')
    assert p.startswith("m.yaml:4: include[0].nccl: NCCL 2.27.3 is not the NCCL torch 2.9.1 cu128's wheel pins: it "
                        "requires exactly 2.27.5") and p.endswith(
        "valid choices: 2.27.5 (or a prefix of it), or leave nccl unset; torch releases whose CUDA 12.8 wheel pins "
        "NCCL 2.27.3: 2.8.0")
    [p] = problems('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, nccl: "2.28.3"}')
    assert "NCCL 2.28.3 is not the NCCL torch 2.9.1 cu128's wheel pins" in p and "torch releases" not in p


def test_cpu_variant_has_no_cudnn():
    head = "name: p\n"
    [p] = problems('{torch: "2.13.0", cuda: cpu, os: debian12, cudnn: "9.10"}', head)
    assert p == "m.yaml:3: include[0].cudnn: a CPU variant has no cuDNN; remove cudnn from CPU variants"


def test_cpu_variant():
    [v] = resolve('{torch: "2.13.0", cuda: cpu, os: debian12, python: "3.11", torchvision: false, '
                  'torchaudio: false}', "name: pytorch-cpu\n")
    assert v.key == "2.13.0-cpu-py3.11-debian12"
    assert v.versions.cudnn is None and v.versions.nccl is None and v.versions.triton is None
    assert v.torch_index_url == "https://download.pytorch.org/whl/cpu" and v.cuda_tag == "cpu"
    assert v.min_driver is None and v.arch_list == ()
    assert v.versions.torchvision is None and v.versions.torchaudio is None


def test_torchvision_must_match_torch():
    [p] = problems('{torch: "2.9.1", cuda: "12.8", os: ubuntu24.04, torchvision: "0.23.0"}')
    assert p == ("m.yaml:4: include[0].torchvision: torchvision 0.23.0 does not match torch 2.9.1 (each torchvision "
                 "release pins one torch version); valid choices: 0.24.1 (or false)")


def test_torchaudio_frozen_after_211():
    [v] = resolve('{torch: "2.13.0", cuda: "13.0", os: ubuntu24.04}')
    assert v.versions.torchaudio is None and v.versions.torchvision == "0.28.0"
    assert v.chosen["torchaudio"] == "none (no torchaudio release matches torch 2.13.0)"
    [p] = problems('{torch: "2.13.0", cuda: "13.0", os: ubuntu24.04, torchaudio: "2.11.0"}')
    assert p.endswith("no torchaudio release matches torch 2.13.0; set torchaudio: false (torchaudio is frozen at "
                      "2.11)")


@pytest.mark.parametrize("matrix_url, inputs_url, expected", [
    (None, None, "https://download.pytorch.org/whl/cu126"),
    ("https://mirror.example/whl/cu126", None, "https://mirror.example/whl/cu126"),
    ("https://mirror.example/whl/cu126", "https://cli.example/simple", "https://cli.example/simple"),
    ("none", None, None),
    (None, "none", None),
    ("https://mirror.example/whl/cu126", " None ", None),
])
def test_torch_index_url_overrides(matrix_url, inputs_url, expected):
    extra = f", torch_index_url: {matrix_url}" if matrix_url else ""
    [v] = resolve(f'{{torch: "2.9.1", cuda: "12.6", os: ubuntu24.04{extra}}}',
                  inputs=BuildInputs(torch_index_url=inputs_url))
    assert v.torch_index_url == expected


def test_unconfirmed_pins_are_flagged():
    [v] = resolve('{torch: "2.9.1", cuda: "12.6", os: ubuntu24.04}')
    assert "confirmed: false" in v.chosen["pins"]


def test_torch_index_override_reaches_render_through_the_variant():
    """The override is applied once (resolve); the rendered pins and index follow it."""
    from imagebuild.render import render_image

    row = '{torch: "2.13.0", cuda: "13.0", os: ubuntu24.04}'
    [pypi] = resolve(row, inputs=BuildInputs(torch_index_url="none"))
    r = render_image(pypi, "runtime", BuildInputs(torch_index_url="none"))
    assert r.build_args == {} and "torch==2.13.0+" not in r.dockerfile
    [mirror] = resolve(row, inputs=BuildInputs(torch_index_url="https://mirror.example/whl/cu130"))
    r = render_image(mirror, "runtime", BuildInputs(torch_index_url="https://mirror.example/whl/cu130"))
    assert r.build_args == {"PIP_EXTRA_INDEX_URL": "https://mirror.example/whl/cu130"}
    assert "torch==2.13.0+cu130" in r.dockerfile
