"""Every error class of the matrix file: its message, its line, and that all of them come out in one run."""

from pathlib import Path
from textwrap import dedent

import pytest

from imagebuild.errors import EXIT_BAD_INPUT, MatrixError
from imagebuild.matrix import load_matrix, parse_matrix, parse_size
from imagebuild.resolve import resolve_matrix

FIXTURES = Path(__file__).parent / "fixtures" / "matrices"

HEAD = """\
name: pytorch
registry: registry.example.internal:5000/ml
gpu_archs: [sm_90]
"""


def problems(text: str, base_dir: Path | None = None) -> list[str]:
    try:
        resolve_matrix(parse_matrix(dedent(text), "m.yaml", base_dir=base_dir))
    except MatrixError as err:
        assert err.exit_code == EXIT_BAD_INPUT
        return [str(p) for p in err.problems]
    return []


def one(text: str, base_dir: Path | None = None) -> str:
    found = problems(text, base_dir)
    assert len(found) == 1, found
    return found[0]


def test_valid_minimal():
    assert problems(HEAD + 'matrix: {torch: ["2.9.1"], cuda: ["12.8"], os: [ubuntu24.04]}\n') == []


def test_unparsable_yaml_has_line():
    with pytest.raises(MatrixError) as err:
        load_matrix(FIXTURES / "unparsable.yaml")
    [p] = err.value.problems
    assert p.line == 6 and p.file.endswith("unparsable.yaml")
    assert "invalid YAML: did not find expected ',' or ']'" in p.message and "started at line 5" in p.message


@pytest.mark.parametrize("text, what", [("- a\n- b\n", "a list"), ("just text\n", "a single value"),
                                        ("", "empty")])
def test_document_not_a_mapping(text, what):
    with pytest.raises(MatrixError) as err:
        parse_matrix(text, "m.yaml")
    [p] = err.value.problems
    assert what in p.message and p.line == 1 and "must be a mapping" in p.choices


def test_unknown_variant_field_suggests_close_match():
    text = HEAD + "defaults:\n  os: ubuntu24.04\n  pytorh: '2.9.1'\nmatrix: {torch: ['2.9.1'], cuda: ['12.8']}\n"
    assert one(text) == "m.yaml:6: defaults.pytorh: unknown field 'pytorh' in defaults; did you mean 'torch'?"


def test_unknown_top_level_key():
    assert problems(HEAD + "matrx: {}\n")[0] == "m.yaml:4: matrx: unknown key 'matrx'; did you mean 'matrix'?"
    text = HEAD + "torch: '2.9.1'\nmatrix: {torch: ['2.9.1'], cuda: ['12.8'], os: [debian12], python: ['3.11']}\n"
    assert one(text).startswith("m.yaml:4: torch: unknown key 'torch'; 'torch' is a variant field: put it under")


def test_unknown_matrix_axis():
    text = HEAD + "defaults: {os: debian12, python: '3.11'}\nmatrix:\n  torch: ['2.9.1']\n  cdua: ['12.8']\n"
    found = problems(text)
    assert found[0] == "m.yaml:7: matrix.cdua: unknown field 'cdua' in matrix; did you mean 'cuda'?"
    assert len(found) == 1  # the missing cuda is not reported again: the typo explains it


def test_unknown_matrix_axis_still_reports_the_rest_of_the_file():
    """The rows are resolved as if the typo were the field it resembles, so the other problems come out too."""
    text = HEAD + ("defaults:\n  os: ubuntu24.04\n  python: '3.99'\n  flavors: [base, runtimee]\n"
                   "matrix:\n  torch: ['2.9.1']\n  cudaa: ['12.8']\n")
    found = problems(text)
    assert "m.yaml:10: matrix.cudaa: unknown field 'cudaa' in matrix; did you mean 'cuda'?" in found
    assert any(p.startswith("m.yaml:6: defaults.python: torch 2.9.1 ships wheels for Python") for p in found), found
    assert any(p.startswith("m.yaml:7: defaults.flavors[1]: unknown flavor 'runtimee'") for p in found), found


def test_missing_required_field_is_reported_beside_an_invalid_one():
    text = HEAD + "defaults:\n  flavors: [base, runtimee]\nmatrix:\n  torch: ['2.9.1']\n  cuda: ['12.8']\n"
    found = problems(text)
    assert any("no 'os' for the matrix rows" in p for p in found) and any("runtimee" in p for p in found), found


def test_every_error_line_has_the_same_form():
    from imagebuild.cli import error_lines

    assert error_lines("/abs/m.yaml:3: x\n./rel.yaml:4: y\n  continued") == \
        "error: /abs/m.yaml:3: x\nerror: ./rel.yaml:4: y\n  continued"
    assert error_lines("error: already") == "error: already"


def test_include_row_with_unknown_field():
    text = HEAD + "defaults: {os: debian12, python: '3.11'}\ninclude:\n  - {torch: '2.9.1', cuda: '12.8'}\n" \
                  "  - {torch: '2.9.1', cuda: '13.0', pyhton: '3.11'}\n"
    assert one(text) == ("m.yaml:7: include[1].pyhton: unknown field 'pyhton' in an include row; "
                         "did you mean 'python'?")


@pytest.mark.parametrize(
    "line, expected",
    [
        ("tf32: 'yes'", "m.yaml:5: defaults.tf32: expected true or false, got 'yes'"),
        ("flavors: base", "m.yaml:5: defaults.flavors: expected a non-empty list of flavors, got 'base'; "
                          "valid choices: base, runtime, dev"),
        ("flavors: [base, devel]", "m.yaml:5: defaults.flavors[1]: unknown flavor 'devel'; did you mean 'dev'?"),
        ("flavors: [base, dev]", "m.yaml:5: defaults.flavors: 'dev' is built FROM 'runtime', which is not listed; "
                                 "add 'runtime'"),
        ("transformer_engine: true", "m.yaml:5: defaults.transformer_engine: expected a version (quoted, like "
                                     "\"2.9\") or false, got true"),
        ("cudnn: [9]", "m.yaml:5: defaults.cudnn: expected a version like \"9.10.2.21\", got a list"),
        ("apt_packages: {dev: ['vim; rm -rf /']}", "m.yaml:5: defaults.apt_packages.dev[0]: 'vim; rm -rf /' is not "
                                                   "a Debian package name (name[=version])"),
        ("pip_packages: {dev: ['--index-url=x']}", "m.yaml:5: defaults.pip_packages.dev[0]: '--index-url=x' looks "
                                                   "like a pip option; give requirements only"),
        ("pip_packages: {devel: [x]}", "m.yaml:5: defaults.pip_packages.devel: unknown flavor 'devel'; "
                                       "did you mean 'dev'?"),
        ("snapshot: yesterday", "m.yaml:5: defaults.snapshot: expected a snapshot timestamp like "
                                "\"20251101T000000Z\", got 'yesterday'"),
        ("mirror: ftp://x", "m.yaml:5: defaults.mirror: expected an http(s):// or file:// URL, got 'ftp://x'"),
        ("python: [3.12]", "m.yaml:5: defaults.python: expected a version like \"3.12\" (quote it: 3.10 unquoted is "
                           "the number 3.1), got a list"),
    ],
)
def test_wrong_types(line, expected):
    text = HEAD + "defaults:\n  " + line + "\nmatrix: {torch: ['2.9.1'], cuda: ['12.8'], os: [ubuntu24.04]}\n"
    assert one(text) == expected


def test_numbers_written_unquoted_mean_their_text():
    text = HEAD + "matrix: {torch: [2.9], cuda: [12.8, 13.0], os: [ubuntu22.04], python: [3.10]}\n"
    doc = parse_matrix(text, "m.yaml")
    variants = resolve_matrix(doc)
    assert [v.key for v in variants] == ["2.9.1-cuda12.8-py3.10-ubuntu22.04", "2.9.1-cuda13.0-py3.10-ubuntu22.04"]


def test_empty_axis():
    text = HEAD + "defaults: {os: debian12}\nmatrix:\n  torch: ['2.9.1']\n  cuda: []\n"
    assert one(text) == ("m.yaml:7: matrix.cuda: axis is empty, so the matrix has no variants; "
                         "give at least one cuda value")


def test_axis_not_a_list():
    text = HEAD + "defaults: {os: debian12}\nmatrix:\n  torch: '2.9.1'\n  cuda: ['12.8']\n"
    assert one(text) == "m.yaml:6: matrix.torch: an axis must be a list of values, got '2.9.1'; torch: ['2.9.1']"


def test_no_variants_at_all():
    assert one(HEAD) == "m.yaml:1: the matrix defines no variants; add a `matrix:` with at least one axis, " \
                        "or `include:` rows"


def test_missing_required_field():
    text = HEAD + "matrix: {torch: ['2.9.1'], cuda: ['12.8']}\ninclude:\n  - {torch: '2.9.1'}\n"
    assert problems(text) == [
        "m.yaml:4: matrix: no 'os' for the matrix rows; set os in defaults or add it as a matrix axis",
        "m.yaml:6: include[0]: no 'cuda' for this include row; set cuda in the row or in defaults",
        "m.yaml:6: include[0]: no 'os' for this include row; set os in the row or in defaults",
    ]


def test_missing_name():
    assert problems("matrix: {torch: ['2.9.1'], cuda: ['12.8'], os: [debian12], python: ['3.11']}\n") == [
        "m.yaml:1: missing required key 'name'; the image repository name, e.g. name: pytorch"]


def test_unknown_os_lists_valid_ones():
    text = HEAD + "matrix: {torch: ['2.9.1'], cuda: ['12.8'], os: [ubuntu24.4]}\n"
    assert one(text) == ("m.yaml:4: matrix.os[0]: unknown OS 'ubuntu24.4'; did you mean 'ubuntu24.04'? "
                         "(valid choices: debian12, debian13, ubuntu22.04, ubuntu24.04)")
    text = HEAD + "matrix: {torch: ['2.9.1'], cuda: ['12.8'], os: [centos7]}\n"
    assert one(text).endswith("unknown OS 'centos7'; valid choices: debian12, debian13, ubuntu22.04, ubuntu24.04")


def test_invalid_registry_and_references():
    text = ("name: PyTorch\nregistry: registry.example.internal:http/ml\n"
            "matrix: {torch: ['2.9.1'], cuda: ['12.8'], os: [ubuntu24.04]}\n"
            "include:\n  - {torch: '2.9.1', cuda: '13.0', os: ubuntu24.04, base_image: 'ubuntu:24.04@sha256:abc'}\n")
    found = problems(text)
    assert found[0].startswith("m.yaml:1: name: 'PyTorch' is not a valid repository name: repository path component")
    assert found[1] == ("m.yaml:2: registry: 'registry.example.internal:http/ml' is not a valid registry: registry "
                        "port 'http' is not a number between 1 and 65535; host[:port][/path], "
                        "e.g. registry.example.internal:5000/ml")
    assert found[2].startswith("m.yaml:5: include[0].base_image: 'ubuntu:24.04@sha256:abc' is not a valid image "
                               "reference: digest 'sha256:abc' must be sha256:<64 lowercase hex digits>; 'bootstrap'")


def test_gpu_archs_checked():
    text = "name: p\ngpu_archs: [sm_90, hopper, sm_90]\nmatrix: {torch: ['2.9.1'], cuda: ['12.8'], os: [debian12]}\n"
    assert problems(text) == [
        "m.yaml:2: gpu_archs[1]: expected a GPU arch like 'sm_90', got 'hopper'; "
        "A100 = sm_80, H100/H200 = sm_90, Blackwell = sm_100/sm_120",
        "m.yaml:2: gpu_archs[2]: 'sm_90' is listed twice",
    ]


def test_ca_certs_relative_to_the_matrix(tmp_path):
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    (tmp_path / "key.pem").write_text("-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n")
    (tmp_path / "dir.pem").mkdir()
    text = HEAD + ("ca_certs:\n  - ca.pem\n  - missing.pem\n  - key.pem\n  - dir.pem\n"
                   "matrix: {torch: ['2.9.1'], cuda: ['12.8'], os: [ubuntu24.04]}\n")
    found = problems(text, base_dir=tmp_path)
    assert found == [
        f"m.yaml:6: ca_certs[1]: CA file not found: {tmp_path / 'missing.pem'}; paths are relative to the matrix file",
        f"m.yaml:7: ca_certs[2]: CA file {tmp_path / 'key.pem'}: holds no PEM certificate "
        "(no '-----BEGIN CERTIFICATE-----' block)",
        f"m.yaml:8: ca_certs[3]: CA file not found: {tmp_path / 'dir.pem'}; paths are relative to the matrix file",
    ]


def test_size_budget_and_perf_min():
    assert parse_size("7.5GB") == 7_500_000_000
    assert parse_size("800MiB") == 800 * 2**20
    assert parse_size("12 gib") == 12 * 2**30
    assert parse_size(1024) == 1024
    for bad in ("12XB", "-1GB", True, "GB"):
        with pytest.raises(ValueError):
            parse_size(bad)
    text = HEAD + "size_budget: {runtime: 1 tonne, devel: 1GB}\nperf_min: {bf16_tflops: -1}\n" \
                  "matrix: {torch: ['2.9.1'], cuda: ['12.8'], os: [ubuntu24.04]}\n"
    found = problems(text)
    assert found[0].startswith("m.yaml:4: size_budget.runtime: expected a size like 7.5GB or 800MiB, got '1 tonne'")
    assert found[1] == "m.yaml:4: size_budget.devel: unknown flavor 'devel'; did you mean 'dev'?"
    assert found[2] == "m.yaml:5: perf_min.bf16_tflops: expected a positive number, got the number -1"


def test_every_field_fixture_is_valid_and_normalised():
    doc = load_matrix(FIXTURES / "every_field.yaml")
    variants = resolve_matrix(doc)
    first = variants[0]
    assert first.flavors == ("base", "runtime", "dev")
    assert first.tf32 is False
    assert first.apt_packages == {"dev": ("gdb", "strace"), "base": ("ca-certificates",)}
    assert first.pip_packages == {"dev": ("jupyterlab>=4", "ruff")}
    assert first.size_budget == {"base": 800 * 2**20, "runtime": 7_500_000_000, "dev": 12_000_000_000}
    assert first.perf_min == {"bf16_tflops": 600.0}
    assert first.layer_limit == 6 * 2**30
    assert first.ca_certs == (str((FIXTURES / "corp-ca.pem").resolve()),)
    assert first.torch_index_url == "https://mirror.example/whl/cu128"
    assert first.registry == "localhost:5000/ml" and first.name == "team/pytorch"
    boot = variants[1]
    assert boot.base.kind == "bootstrap" and boot.base.snapshot == "20251101T000000Z"
    assert boot.base.mirror == "http://deb.debian.org/debian" and boot.base.packages == ("ca-certificates", "tini")
    assert boot.torch_index_url is None
    assert variants[2].base.ref == "ubuntu:24.04@sha256:" + "0" * 64


def test_all_problems_reported_in_one_run():
    with pytest.raises(MatrixError) as err:
        resolve_matrix(load_matrix(FIXTURES / "many_errors.yaml"))
    lines = [(p.line, p.keypath) for p in err.value.problems]
    assert lines == [
        (2, "registry"), (3, "gpu_archs[1]"), (5, "defaults.os"), (7, "defaults.flavors"), (8, "defaults.tf32"),
        (9, "defaults.pytorh"), (12, "matrix.cuda"), (14, "include[0].cuda"), (14, "include[0].cudnn"),
        (15, "include[1].python"), (15, "include[1].transformer_engine"), (16, "include[2].base_image"),
        (17, "include[3].cudnn"), (18, "include[4].cudnn"), (19, "include[5].torchvision"), (20, "include[6].cuda"),
        (20, "include[6].transformer_engine"), (23, "size_budget.runtime"), (24, "pytorh"),
    ]
    assert lines == sorted(lines, key=lambda x: x[0])


MATRIX_ROWS = "matrix: {torch: ['2.9.1'], cuda: ['12.8'], os: [ubuntu24.04]}\n"


@pytest.mark.parametrize(("registry", "message"), [
    ("https://host/ml", "'https://host/ml' is not a valid registry: a registry is host[:port][/path] without "
                        "'https://'"),
    ("builder:hunter22@host/ml", "'builder:***@host/ml' is not a valid registry: a registry cannot carry "
                                 "credentials"),
    ("t0kenvalue@host", "'***@host' is not a valid registry: a registry cannot carry credentials"),
])
def test_registry_mistakes_are_said_plainly_and_never_echo_a_password(registry, message):
    found = one(f"name: pytorch\nregistry: {registry}\n" + MATRIX_ROWS)
    assert found.startswith(f"m.yaml:2: registry: {message}"), found
    assert "hunter22" not in found and "t0kenvalue" not in found


def test_a_name_whose_references_would_pass_255_characters_is_refused_at_validate():
    name = "/".join(["team" * 5] * 9)
    found = one(f"name: {name}\nregistry: registry.example.internal:5000/ml\n" + MATRIX_ROWS)
    assert found.startswith("m.yaml:1: name: registry/name is 222 characters; with a ':tag' of up to 64 an image "
                            "reference would pass 255"), found


@pytest.mark.parametrize(("req", "message"), [
    ("numpy>=>2", "'numpy>=>2' is not a pip requirement (PEP 508: "),
    ("two words", "'two words' is not a pip requirement (PEP 508: "),
    ("pkg @ https://s3cr3t@files.example/pkg.whl", "'pkg @ https://***@files.example/pkg.whl' carries credentials"),
])
def test_pip_packages_are_pep508_requirements_at_validate(req, message):
    found = one(HEAD + MATRIX_ROWS + f"defaults:\n  pip_packages:\n    dev: ['{req}']\n")
    assert found.startswith(f"m.yaml:7: defaults.pip_packages.dev[0]: {message}"), found
    assert "s3cr3t" not in found


def test_layer_limit():
    text = HEAD + "layer_limit: 5GiB\nmatrix: {torch: ['2.9.1'], cuda: ['12.8'], os: [ubuntu24.04]}\n"
    assert problems(text) == []
    for bad, shown in (("lots", "'lots'"), (0, "the number 0"), ("-1GB", "'-1GB'")):
        text = HEAD + f"layer_limit: {bad}\nmatrix: {{torch: ['2.9.1'], cuda: ['12.8'], os: [ubuntu24.04]}}\n"
        [found] = problems(text)
        assert found.startswith(f"m.yaml:4: layer_limit: expected a size like 8GiB or 5GB, got {shown}"), found
