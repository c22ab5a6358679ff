"""MatrixDoc: a matrix file after YAML loading, schema checks and expansion (before compatibility resolution)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from imagebuild.compat import Tables
from imagebuild.compat import load as load_tables
from imagebuild.errors import MatrixError, Problem
from imagebuild.files import FileProblem, read_bounded_text
from imagebuild.matrix.audit import AuditPolicy
from imagebuild.matrix.expand import RawVariant, expand
from imagebuild.matrix.schema import check_document
from imagebuild.matrix.yamlload import MAX_TEXT, Loaded, YPath, keypath, load_yaml
from imagebuild.models import Location


@dataclass
class MatrixDoc:
    path: Path
    file: str  # as shown in messages (relative to the working directory when under it)
    name: str
    registry: str
    gpu_archs: tuple[str, ...]
    variants: list[RawVariant]
    ca_certs: tuple[Path, ...] = ()
    size_budget: dict[str, int] = field(default_factory=dict)
    layer_limit: int | None = None
    perf_min: dict[str, float] = field(default_factory=dict)
    compression: dict[str, str] = field(default_factory=dict)  # registry ("*": any) -> zstd | gzip (push)
    gpus: tuple[str, ...] = ()  # the matrix-level `gpus:` (checked names/archs; a variant's own replaces it)
    audit: AuditPolicy | None = None  # `audit:` (matrix/audit.py)
    problems: list[Problem] = field(default_factory=list)  # schema problems; resolve_matrix raises them all
    loaded: Loaded | None = None

    def line(self, path: YPath) -> int:
        return self.loaded.line(path) if self.loaded else 0

    def problem(self, path: YPath, message: str, choices: str = "") -> Problem:
        if self.loaded is None:
            return Problem(self.file, 0, "", message, choices)
        return self.loaded.problem(path, message, choices)

    def location(self, path: YPath) -> Location:
        return Location(self.file, self.line(path), keypath(path))


def display_name(path: Path) -> str:
    """`images/h100.yaml` for files under the working directory, the absolute path otherwise."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


_NOT_A_MAPPING = "the matrix file must be a mapping with at least `name:` and `matrix:` (or `include:`)"


def parse_matrix(text: str, file: str = "<matrix>", base_dir: Path | None = None,
                 tables: Tables | None = None, path: Path | None = None) -> MatrixDoc:
    """Parse matrix text. Raises MatrixError for unparsable YAML or a non-mapping document; every other problem
    is collected in `doc.problems` (resolve_matrix raises them together with its own)."""
    tables = tables or load_tables()
    base_dir = base_dir or Path.cwd()
    loaded = load_yaml(text, file)
    if loaded.data is None:
        raise MatrixError([Problem(file, 1, "", "the document is empty", _NOT_A_MAPPING)])
    if not isinstance(loaded.data, dict):
        kind = "a list" if isinstance(loaded.data, list) else f"a single value ({loaded.data!r})"
        raise MatrixError([Problem(file, loaded.line(()), "", f"the document is {kind}, not a mapping",
                                   _NOT_A_MAPPING)])
    schema, problems = check_document(loaded, tables, base_dir)
    variants, expand_problems = expand(schema, loaded)
    return MatrixDoc(
        path=path or Path(file),
        file=file,
        name=schema.name,
        registry=schema.registry,
        gpu_archs=schema.gpu_archs,
        variants=variants,
        ca_certs=schema.ca_certs,
        size_budget=schema.size_budget,
        layer_limit=schema.layer_limit,
        perf_min=schema.perf_min,
        compression=schema.compression,
        audit=schema.audit,
        gpus=schema.gpus.value if schema.gpus is not None and schema.gpus.ok else (),
        problems=loaded.problems + problems + expand_problems,
        loaded=loaded,
    )


def load_matrix(path: str | Path, tables: Tables | None = None) -> MatrixDoc:
    """Load a matrix file (see parse_matrix for what raises and what is collected)."""
    path = Path(path)
    file = display_name(path)
    if not path.exists():
        raise MatrixError([Problem(file, 0, "", "no such file")])
    try:
        text = read_bounded_text(path, "matrix file", MAX_TEXT)  # never more than the limit in memory
    except FileProblem as exc:
        raise MatrixError([Problem(file, 0, "", str(exc).removeprefix(f"{path}: "))]) from None
    return parse_matrix(text, file, base_dir=path.resolve().parent, tables=tables, path=path)
