"""defaults + matrix product - exclude + include, with each field remembering where it was written."""

from textwrap import dedent

import pytest

from imagebuild.errors import MatrixError
from imagebuild.matrix import parse_matrix
from imagebuild.resolve import resolve_matrix

TEXT = """\
name: pytorch
defaults:
  os: ubuntu24.04
  python: "3.12"
  tf32: true
matrix:
  torch: ["2.8.0", "2.9.1"]
  cuda: ["12.6", "12.8"]
exclude:
  - {torch: "2.8.0", cuda: "12.6"}
include:
  - {torch: "2.9.1", cuda: "13.0", tf32: false}
"""


def test_product_exclude_include_order():
    doc = parse_matrix(TEXT, "m.yaml")
    assert doc.problems == []
    rows = [(v.values["torch"], v.values["cuda"]) for v in doc.variants]
    assert rows == [("2.8.0", "12.8"), ("2.9.1", "12.6"), ("2.9.1", "12.8"), ("2.9.1", "13.0")]
    assert doc.variants[-1].values["tf32"] is False  # the row overrides the default
    assert doc.variants[0].values["tf32"] is True


def test_origins_point_at_where_each_value_is_written():
    doc = parse_matrix(TEXT, "m.yaml")
    first = doc.variants[0]
    assert doc.line(first.origins["torch"]) == 7
    assert doc.line(first.origins["cuda"]) == 8
    assert doc.line(first.origins["os"]) == 3
    last = doc.variants[-1]
    assert doc.line(last.origins["cuda"]) == 12 and doc.line(last.origins["os"]) == 3
    assert last.label == "include[0]" and first.label == "matrix row torch=2.8.0 cuda=12.8"


def test_exclude_can_match_defaults():
    text = TEXT.replace('  - {torch: "2.8.0", cuda: "12.6"}', '  - {os: ubuntu24.04, cuda: "12.6"}')
    doc = parse_matrix(text, "m.yaml")
    assert [(v.values["torch"], v.values["cuda"]) for v in doc.variants[:2]] == [("2.8.0", "12.8"), ("2.9.1", "12.8")]


def test_exclude_that_matches_nothing_is_an_error():
    doc = parse_matrix(TEXT.replace('cuda: "12.6"}', 'cuda: "12.4"}'), "m.yaml")
    [p] = doc.problems
    assert str(p) == ('m.yaml:10: exclude[0]: exclude row {torch: 2.8.0, cuda: 12.4} matches no row of the matrix '
                      'product; exclude rows compare the values as written in matrix/defaults')


def test_exclude_everything():
    text = "name: p\ndefaults: {os: debian12}\nmatrix: {torch: ['2.9.1'], cuda: [cpu]}\nexclude: [{torch: '2.9.1'}]\n"
    [p] = parse_matrix(text, "m.yaml").problems
    assert p.message == "exclude removes every variant of the matrix" and p.line == 4


def test_include_only_matrix():
    text = "name: p\ninclude:\n  - {torch: '2.13.0', cuda: cpu, os: debian12}\n"
    [v] = resolve_matrix(parse_matrix(text, "m.yaml"))
    assert v.key == "2.13.0-cpu-py3.11-debian12"
    assert v.chosen["python"] == "3.11 (the debian12 python3)"


def test_duplicates_after_resolution():
    text = dedent("""\
        name: p
        defaults: {os: ubuntu24.04, python: "3.12"}
        matrix:
          torch: ["2.9", "2.9.1"]
          cuda: ["12.8"]
        include:
          - {torch: "2.9.1", cuda: "13.0"}
          - {torch: "2.9.1", cuda: "13.0", tf32: false}
        """)
    with pytest.raises(MatrixError) as err:
        resolve_matrix(parse_matrix(text, "m.yaml"))
    assert [str(p) for p in err.value.problems] == [
        "m.yaml:4: matrix.torch[1]: duplicate variant 2.9.1-cuda12.8-py3.12-ubuntu24.04: matrix row torch=2.9.1 "
        "cuda=12.8 gives the same images as matrix row torch=2.9 cuda=12.8 (line 4); remove one of them, or exclude it",
        "m.yaml:8: include[1]: duplicate variant 2.9.1-cuda13.0-py3.12-ubuntu24.04: include[1] gives the same images "
        "as include[0] (line 7); remove one of them, or exclude it",
    ]


def test_bad_optional_field_does_not_hide_compatibility_problems():
    text = "name: p\ndefaults: {os: debian12, tf32: maybe}\nmatrix: {torch: ['2.9.1'], cuda: ['12.3']}\n"
    with pytest.raises(MatrixError) as err:
        resolve_matrix(parse_matrix(text, "m.yaml"))
    assert [p.keypath for p in err.value.problems] == ["defaults.tf32", "matrix.cuda[0]"]
