"""What every resolution rule needs: the tables, the document (for error lines) and the problem list."""

from __future__ import annotations

from collections.abc import Iterable

from imagebuild.compat import Tables, vtuple
from imagebuild.errors import Problem
from imagebuild.inputs import BuildInputs
from imagebuild.matrix import MatrixDoc, RawVariant


class Ctx:
    def __init__(self, doc: MatrixDoc, tables: Tables, inputs: BuildInputs):
        self.doc, self.tables, self.inputs = doc, tables, inputs
        self.problems: list[Problem] = []

    def bad(self, rv: RawVariant, fieldname: str | tuple[str | int, ...], message: str, choices: str = "") -> None:
        """Report at the line where the field's value is written (or at the row when it came from nowhere)."""
        path = fieldname if isinstance(fieldname, tuple) else rv.origins.get(fieldname, rv.row)
        self.problems.append(self.doc.problem(path, message, choices))


def newest(known: Iterable[str], spec: str) -> str | None:
    """`spec` itself when known, else the newest known version it prefixes ("2.9" -> "2.9.1")."""
    known = list(known)
    if spec in known:
        return spec
    want = vtuple(spec)
    matches = [v for v in known if vtuple(v)[: len(want)] == want]
    return max(matches, key=vtuple) if matches else None


def known_list(known: Iterable[str], spec: str, what: str) -> str:
    """Choices for an unknown version: the same minor's releases when there are some, else all."""
    known = sorted(known, key=vtuple)
    minor = vtuple(spec)[:2]
    near = [v for v in known if vtuple(v)[:2] == minor]
    if near:
        return f"known {what} {'.'.join(map(str, minor))} releases: " + ", ".join(near)
    return f"known {what} releases: " + ", ".join(known)


def is_prefix(short: str, full: str) -> bool:
    want = vtuple(short)
    return vtuple(full)[: len(want)] == want
