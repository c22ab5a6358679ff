"""YAML loading keeps lines, raw numeric text, and reports duplicate keys and syntax errors with their line."""

import pytest

from imagebuild.errors import MatrixError
from imagebuild.matrix.yamlload import keypath, load_yaml

TEXT = """\
name: pytorch
defaults:
  python: 3.10
  os: ubuntu24.04
include:
  - {torch: "2.9.1", cuda: 12.8}
  -
    torch: "2.7.1"
    cuda: "12.8"
"""


def test_lines_for_keys_and_items():
    loaded = load_yaml(TEXT, "m.yaml")
    assert loaded.line(("name",)) == 1
    assert loaded.line(("defaults", "os")) == 4
    assert loaded.line(("include", 0)) == 6
    assert loaded.line(("include", 0, "cuda")) == 6
    assert loaded.line(("include", 1, "cuda")) == 9
    assert loaded.line(("include", 1, "nonexistent")) == 8  # the nearest ancestor: the row (its first key)


def test_raw_text_of_plain_numbers():
    loaded = load_yaml(TEXT, "m.yaml")
    assert loaded.data["defaults"]["python"] == 3.1  # what YAML says...
    assert loaded.raw[("defaults", "python")] == "3.10"  # ...and what the user wrote
    assert loaded.raw[("include", 0, "cuda")] == "12.8"


def test_duplicate_key_is_a_problem_with_line():
    loaded = load_yaml("name: a\nname: b\n", "m.yaml")
    [problem] = loaded.problems
    assert str(problem) == "m.yaml:2: name: duplicate key (first at line 1); YAML keeps only one"


def test_unparsable_yaml_reports_line():
    with pytest.raises(MatrixError) as err:
        load_yaml("name: a\nmatrix:\n  torch: [1\n  cuda: x\n", "m.yaml")
    [problem] = err.value.problems
    assert problem.line == 4
    assert "invalid YAML" in problem.message and "started at line 3" in problem.message


def test_tab_indentation_is_reported():
    with pytest.raises(MatrixError) as err:
        load_yaml("name: a\nmatrix:\n\ttorch: [1]\n", "m.yaml")
    assert err.value.problems[0].line == 3


def test_merge_keys_and_anchors_work():
    loaded = load_yaml("base: &b {os: debian12}\ndefaults:\n  <<: *b\n  python: '3.11'\n", "m.yaml")
    assert loaded.data["defaults"] == {"os": "debian12", "python": "3.11"}


def test_keypath():
    assert keypath(("include", 0, "torch")) == "include[0].torch"
    assert keypath(("matrix", "torch", 1)) == "matrix.torch[1]"
    assert keypath(()) == ""
