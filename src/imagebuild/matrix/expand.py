"""defaults + matrix (cross product) - exclude + include -> one RawVariant per row, each field knowing its line.

Semantics (documented in the README's matrix reference):
- the product runs over the axes in file order; each product row is `defaults` overridden by its axis values;
- an `exclude` row removes every product row whose values equal all the fields the exclude row names (defaults
  count, so `exclude: [{os: ubuntu22.04}]` works); an exclude row that removes nothing is an error (a typo there
  would otherwise silently build what you meant to skip);
- each `include` row adds one variant: `defaults` overridden by the row (a row's value replaces the default's,
  lists and mappings included). Include rows are not excluded.
Duplicates are found after resolution (so "2.9" and "2.9.1" collide too): see resolve/.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from imagebuild.errors import Problem
from imagebuild.matrix.fields import REQUIRED_FIELDS
from imagebuild.matrix.schema import Cell, Schema
from imagebuild.matrix.yamlload import Loaded, YPath, keypath


@dataclass
class RawVariant:
    """One row before resolution. `origins` says where each field's value is written (for error lines)."""

    values: dict[str, Any]  # valid fields only: an invalid one is already reported and left out
    origins: dict[str, YPath]
    row: YPath  # ("include", 2) or the path of the row's first axis value
    label: str  # "include[2]" / "matrix row torch=2.9.1 cuda=12.8"
    invalid: frozenset[str] = frozenset()  # fields reported invalid ("?name" for unknown field names)

    @property
    def valid(self) -> bool:
        """Resolvable: no key field is invalid. Other invalid fields are just absent (the default applies), so
        one bad `tf32` does not hide the compatibility problems of the rows."""
        return not (self.invalid & _KEY_FIELDS) and not (self.invalid and any(f not in self.values
                                                                                   for f in REQUIRED_FIELDS))


_KEY_FIELDS = frozenset({"torch", "cuda", "os", "python"})


def _merge(cells: list[tuple[str, Cell]]) -> tuple[dict[str, Any], dict[str, YPath], frozenset[str]]:
    values: dict[str, Any] = {}
    origins: dict[str, YPath] = {}
    invalid: set[str] = set()
    for name, cell in cells:
        if cell.ok and not name.startswith("?"):
            values[name], origins[name] = cell.value, cell.path
            invalid.discard(name)
        else:
            values.pop(name, None)
            origins.pop(name, None)
            invalid.add(name)
    return values, origins, frozenset(invalid)


def _matches(values: dict[str, Any], row: dict[str, Cell]) -> bool:
    return all(not name.startswith("?") and values.get(name) == cell.value for name, cell in row.items())


def expand(schema: Schema, loaded: Loaded) -> tuple[list[RawVariant], list[Problem]]:
    problems: list[Problem] = []
    defaults = list(schema.defaults.items())
    variants: list[RawVariant] = []

    axes = [(name, cells) for name, cells in schema.axes]
    product: list[RawVariant] = []
    if axes and all(cells for _, cells in axes):
        names = [name for name, _ in axes]
        for combo in itertools.product(*(cells for _, cells in axes)):
            values, origins, invalid = _merge(defaults + list(zip(names, combo, strict=True)))
            label = "matrix row " + " ".join(
                f"{n}={c.value}" for n, c in zip(names, combo, strict=True) if not n.startswith("?"))
            product.append(RawVariant(values, origins, combo[0].path, label, invalid))
        # a required field nobody set is its own problem, also beside other (invalid) fields; one that is set but
        # invalid is already reported
        missing = [f for f in REQUIRED_FIELDS if f not in product[0].values and f not in product[0].invalid
                   and not any(n.startswith("?") for n in product[0].invalid)] if product else []
        if missing:
            for f in missing:
                problems.append(loaded.problem(("matrix",), f"no {f!r} for the matrix rows",
                                               f"set {f} in defaults or add it as a matrix axis"))
            product = []

    used = [False] * len(schema.exclude)
    for rv in product:
        hit = False
        for i, (_, row) in enumerate(schema.exclude):
            if all(c.ok for c in row.values()) and _matches(rv.values, row):
                used[i] = hit = True
        if not hit:
            variants.append(rv)
    for (path, row), was_used in zip(schema.exclude, used, strict=True):
        if product and not was_used and all(c.ok for c in row.values()):
            shown = ", ".join(f"{n}: {c.value}" for n, c in row.items())
            problems.append(loaded.problem(path, f"exclude row {{{shown}}} matches no row of the matrix product",
                                           "exclude rows compare the values as written in matrix/defaults"))

    for path, row in schema.include:
        values, origins, invalid = _merge(defaults + list(row.items()))
        missing = [f for f in REQUIRED_FIELDS if f not in values and f not in invalid
                   and not any(n.startswith("?") for n in invalid)]
        if missing:
            for f in missing:
                problems.append(loaded.problem(path, f"no {f!r} for this include row",
                                               f"set {f} in the row or in defaults"))
            continue
        variants.append(RawVariant(values, origins, path, keypath(path), invalid))

    if not variants and not problems and not any(not c.ok for _, cells in axes for c in cells):
        if not axes and not schema.include and not schema.unknown_keys:
            problems.append(loaded.problem((), "the matrix defines no variants",
                                           "add a `matrix:` with at least one axis, or `include:` rows"))
        elif axes and all(cells for _, cells in axes):
            problems.append(loaded.problem(("exclude",), "exclude removes every variant of the matrix"))
    return variants, problems
