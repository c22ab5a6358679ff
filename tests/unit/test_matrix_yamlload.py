"""YAML loading keeps lines, raw numeric text, and reports duplicate keys and syntax errors with their line."""

import re

import pytest

from imagebuild.errors import MatrixError
from imagebuild.matrix import parse_matrix
from imagebuild.matrix.yamlload import MAX_DEPTH, MAX_NODES, MAX_TEXT, keypath, load_yaml
from imagebuild.resolve import resolve_matrix

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


def _bomb(levels: int = 9) -> str:
    lines = ["name: pytorch", "registry: r.example/ml", 'l0: &l0 ["2.9.1", "2.9.1", "2.9.1", "2.9.1", "2.9.1"]']
    for n in range(1, levels):
        lines.append(f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]")
    lines += ["matrix:", f"  torch: *l{levels - 1}", "  cuda: ['12.8']", "  os: [ubuntu24.04]"]
    return "\n".join(lines) + "\n"


def test_alias_bomb_used_as_an_axis_is_one_line_fast_and_small():
    """Nested aliases as a matrix axis: 5 * 9**8 values if expanded; refused before any is built."""
    import time
    import tracemalloc

    tracemalloc.start()
    started = time.monotonic()
    with pytest.raises(MatrixError) as err:
        parse_matrix(_bomb(), "bomb.yaml")
    seconds = time.monotonic() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(err.value.problems) == 1
    assert re.fullmatch(rf"bomb\.yaml:\d+: expands to more than {MAX_NODES} values \(aliases repeated inside "
                        r"aliases\?\)", str(err.value))
    assert peak < 32 << 20, (seconds, peak)  # refused before expanding: memory, not a timing, is the proof


@pytest.mark.parametrize(("text", "message"), [
    ("a: &a [*a]\n", "recursive alias"),
    ("a: &a {b: *a}\n", "recursive alias"),
    ("a:\n" + "".join(" " * i + "b:\n" for i in range(1, MAX_DEPTH + 5)), f"nested deeper than {MAX_DEPTH} levels"),
    ("a: [" + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "]\n", f"nested deeper than {MAX_DEPTH} levels"),
    ("a: '" + "x" * MAX_TEXT + "'\n", "larger than 64 KiB"),
])
def test_hostile_shapes_are_one_problem(text, message):
    with pytest.raises(MatrixError) as err:
        load_yaml(text, "m.yaml")
    assert len(err.value.problems) == 1 and message in str(err.value)


def test_thousands_of_problems_list_the_first_few_dozen_and_count_the_rest():
    from imagebuild.errors import SHOWN_PROBLEMS

    rows = "".join(f"  - {{torch: 'x{i}', cudaa: 1}}\n" for i in range(500))
    text = "name: pytorch\nregistry: r.example/ml\nmatrix: {torch: ['2.9.1'], cuda: ['12.8'], os: [ubuntu24.04]}\n"
    with pytest.raises(MatrixError) as err:
        resolve_matrix(parse_matrix(text + "include:\n" + rows, "m.yaml"))
    lines = str(err.value).splitlines()
    assert len(err.value.problems) >= 1000
    assert len(lines) == SHOWN_PROBLEMS + 1
    assert lines[-1] == f"m.yaml: ... and {len(err.value.problems) - SHOWN_PROBLEMS} more problems " \
                        f"({len(err.value.problems)} in all; fix these first)"
