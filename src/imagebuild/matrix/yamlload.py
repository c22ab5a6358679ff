"""YAML with line numbers.

`yaml.safe_load` forgets where a value was written, and every matrix error must say `FILE:LINE`. So we compose the
document to nodes (libyaml when available: fast) and build plain Python values ourselves, recording for every path
(`("include", 0, "torch")`) the line its key or item starts on.

Two things plain PyYAML gets wrong for a version matrix are handled here:
- duplicate keys silently keep the last value: we report them;
- `python: 3.10` becomes the float 3.1: we keep the source text of plain numeric scalars (`raw`) so the schema can
  read versions the way the user wrote them.

And a matrix may be hostile (a pull request's file validated in CI): `files.compose_yaml` counts the parser's events,
then walks the composed graph once (each node once) and refuses a file whose alias-expanded tree would exceed
`MAX_NODES` nodes or `MAX_DEPTH` levels, or whose aliases are recursive, before anything is built from it. A "billion
laughs" alias bomb is one error line in milliseconds instead of gigabytes; the text is limited to `MAX_TEXT`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeAlias

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from imagebuild.errors import MatrixError, Problem
from imagebuild.files import YAML_MAX_DEPTH, YAML_MAX_NODES, YamlTooBig, compose_yaml

YPath: TypeAlias = tuple[str | int, ...]  # ("include", 0, "torch")

_NUMERIC_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
MAX_DEPTH = YAML_MAX_DEPTH  # aliases can nest; a matrix never needs this deep
MAX_NODES = YAML_MAX_NODES
MAX_TEXT = 64 << 10  # characters; the shipped matrices have 1-2 thousand (and composing 64 KiB takes ~0.3 s here)


def keypath(path: YPath) -> str:
    """("include", 0, "torch") -> "include[0].torch"."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


@dataclass
class Loaded:
    file: str
    data: Any
    lines: dict[YPath, int] = field(default_factory=dict)
    raw: dict[YPath, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def line(self, path: YPath) -> int:
        """Line of `path`, or of its nearest recorded ancestor (1-based; 0 when unknown)."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), 0)

    def problem(self, path: YPath, message: str, choices: str = "") -> Problem:
        return Problem(self.file, self.line(path), keypath(path), message, choices)


class _Builder:
    def __init__(self, loaded: Loaded) -> None:
        self.loaded = loaded
        self.constructor = SafeConstructor()

    def build(self, node: MappingNode | SequenceNode | ScalarNode, path: YPath, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            self.loaded.problems.append(self.loaded.problem(path, "nesting too deep (recursive alias?)"))
            return None
        if isinstance(node, MappingNode):
            return self._mapping(node, path, depth)
        if isinstance(node, SequenceNode):
            out: list[Any] = []
            for i, item in enumerate(node.value):
                self.loaded.lines.setdefault((*path, i), item.start_mark.line + 1)
                out.append(self.build(item, (*path, i), depth + 1))
            return out
        if node.tag in _NUMERIC_TAGS and not node.style:  # plain style: None (PyYAML) or '' (libyaml)
            self.loaded.raw[path] = node.value
        return self.constructor.construct_object(node, deep=True)

    def _mapping(self, node: MappingNode, path: YPath, depth: int) -> dict[Any, Any]:
        self.constructor.flatten_mapping(node)  # resolves `<<: *anchor` merge keys in place
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, ScalarNode):
                self.loaded.problems.append(
                    Problem(self.loaded.file, line, keypath(path), "a key must be a plain name, not a list or mapping")
                )
                continue
            key = self.constructor.construct_object(key_node)
            if not isinstance(key, str):
                key = key_node.value  # `3.10:` or `true:` as a key: keep the text, the schema judges the name
            child = (*path, key)
            if key in out:
                self.loaded.problems.append(
                    Problem(self.loaded.file, line, keypath(child),
                            f"duplicate key (first at line {self.loaded.lines.get(child, 0)}); YAML keeps only one")
                )
                continue
            self.loaded.lines[child] = line
            out[key] = self.build(value_node, child, depth + 1)
        return out


def load_yaml(text: str, file: str) -> Loaded:
    """Parse `text`; raises MatrixError (with the line) when it is not YAML at all, or larger than the limits."""
    if len(text) > MAX_TEXT:
        raise MatrixError([Problem(file, 0, "", f"larger than {MAX_TEXT >> 10} KiB; a matrix file is a few KiB")])
    try:
        node = compose_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = exc.problem or exc.context or "syntax error"
        if exc.context and exc.problem:  # e.g. "while parsing a flow sequence" + where that sequence started
            started = f" started at line {exc.context_mark.line + 1}" if exc.context_mark else ""
            what = f"{exc.problem} ({exc.context}{started})"
        raise MatrixError([Problem(file, mark.line + 1 if mark else 0, "", f"invalid YAML: {what}",
                                   "check the indentation and quote values containing ':' or '#'")]) from None
    except yaml.YAMLError as exc:
        raise MatrixError([Problem(file, 0, "", f"invalid YAML: {exc}")]) from None
    except RecursionError:
        raise MatrixError([Problem(file, 0, "", f"invalid YAML: nested deeper than {MAX_DEPTH} levels")]) from None
    except YamlTooBig as big:
        raise MatrixError([Problem(file, big.line, "", big.why)]) from None
    loaded = Loaded(file=file, data=None)
    if node is None:
        return loaded
    loaded.lines[()] = node.start_mark.line + 1
    loaded.data = _Builder(loaded).build(node, ())
    return loaded
