"""Compatibility resolution: RawVariants -> ResolvedVariants with every pin filled, or MatrixError with ALL problems.

    resolve_matrix(doc, inputs) -> list[ResolvedVariant]
    resolve_file(name_or_path, inputs) -> (MatrixDoc, list[ResolvedVariant])   # find + load + resolve
"""

from __future__ import annotations

from pathlib import Path

from imagebuild.compat import Tables
from imagebuild.compat import load as load_tables
from imagebuild.errors import MatrixError, Problem
from imagebuild.inputs import BuildInputs
from imagebuild.matrix import MatrixDoc, find_matrix, load_matrix
from imagebuild.models import ResolvedVariant
from imagebuild.resolve.rules import Ctx
from imagebuild.resolve.variant import resolve_row, variant_key

__all__ = ["resolve_file", "resolve_matrix", "variant_key"]


def _unique_sorted(problems: list[Problem]) -> list[Problem]:
    """A bad default shared by many variants is reported once; then in file order."""
    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=lambda p: (p.line == 0, p.line))


def resolve_matrix(doc: MatrixDoc, inputs: BuildInputs | None = None,
                   tables: Tables | None = None) -> list[ResolvedVariant]:
    """Resolve every variant of `doc`; raises MatrixError with the schema problems and the resolution problems."""
    ctx = Ctx(doc, tables or load_tables(), inputs or BuildInputs())
    resolved: list[ResolvedVariant] = []
    first: dict[str, tuple[str, int]] = {}
    for rv in doc.variants:
        if not rv.valid:  # a field of it is already reported; resolving would only add follow-on noise
            continue
        for result in resolve_row(ctx, rv):
            if result.key in first:
                label, line = first[result.key]
                ctx.problems.append(doc.problem(
                    rv.row, f"duplicate variant {result.key}: {rv.label} gives the same images as {label} "
                    f"(line {line})", "remove one of them, or exclude it"))
                continue
            first[result.key] = (rv.label, doc.line(rv.row))
            resolved.append(result)
    problems = _unique_sorted(doc.problems + ctx.problems)
    if problems:
        raise MatrixError(problems)
    return resolved


def resolve_file(matrix: str | Path, inputs: BuildInputs | None = None) -> tuple[MatrixDoc, list[ResolvedVariant]]:
    """`--matrix` value -> (doc, variants): find_matrix, load_matrix, resolve_matrix."""
    doc = load_matrix(find_matrix(matrix))
    return doc, resolve_matrix(doc, inputs)
