"""The matrix file's top level: which keys exist, what each holds; collects every problem, never stops at the first.

Variant-field values become `Cell`s (normalised value + where it was written); an invalid one stays in the tree
marked `ok=False`, so expansion keeps the shape of the file and resolve/ can skip the variants it poisons instead of
reporting follow-on errors.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagebuild.compat import Tables
from imagebuild.errors import Problem
from imagebuild.files import FileProblem, certificate_blocks
from imagebuild.matrix.audit import AuditPolicy, check_audit
from imagebuild.matrix.fields import VARIANT_FIELDS, Bad, check_field, describe, suggest
from imagebuild.matrix.yamlload import Loaded, YPath
from imagebuild.models import FLAVORS
from imagebuild.oci.reference import (
    ReferenceSyntaxError,
    check_registry,
    check_repository_name,
    check_repository_room,
)
from imagebuild.secrets import redact_host

TOP_KEYS = ("name", "registry", "gpu_archs", "gpus", "defaults", "matrix", "include", "exclude", "ca_certs",
            "size_budget", "perf_min", "layer_limit", "compression", "audit")
ARCH_RE = re.compile(r"^sm_\d{2,3}[af]?$")
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b|b)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_PERF_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass
class Cell:
    value: Any
    path: YPath
    ok: bool = True


@dataclass
class Schema:
    """The checked top level; variant fields as Cells."""

    name: str = ""
    registry: str = ""
    gpu_archs: tuple[str, ...] = ()
    gpus: Cell | None = None  # the matrix-level `gpus:` (a variant's own `gpus` replaces it)
    defaults: dict[str, Cell] = field(default_factory=dict)
    axes: list[tuple[str, list[Cell]]] = field(default_factory=list)
    include: list[tuple[YPath, dict[str, Cell]]] = field(default_factory=list)
    exclude: list[tuple[YPath, dict[str, Cell]]] = field(default_factory=list)
    ca_certs: tuple[Path, ...] = ()
    size_budget: dict[str, int] = field(default_factory=dict)
    perf_min: dict[str, float] = field(default_factory=dict)
    layer_limit: int | None = None  # bytes: no layer of any image larger (None: the default, 8 GiB)
    compression: dict[str, str] = field(default_factory=dict)  # registry host ("*": any) -> zstd | gzip
    audit: AuditPolicy | None = None  # `audit:` (matrix/audit.py): what `imagebuild audit` fails on
    unknown_keys: tuple[str, ...] = ()  # top-level typos ("matrx"): they explain a missing matrix


def parse_size(value: Any) -> int:
    """'7.5GB' -> 7_500_000_000, '800MiB' -> 838_860_800, 123 -> 123 (bytes). Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        return value
    match = _SIZE_RE.match(str(value)) if isinstance(value, (str, float)) else None
    if not match:
        raise ValueError(value)
    number, unit = match.groups()
    return int(float(number) * _UNITS[(unit or "b").lower()])


class _Checker:
    def __init__(self, loaded: Loaded, tables: Tables, base_dir: Path):
        self.loaded, self.tables, self.base_dir = loaded, tables, base_dir
        self.problems: list[Problem] = []

    def bad(self, path: YPath, message: str, choices: str = "") -> None:
        self.problems.append(self.loaded.problem(path, message, choices))

    def cell(self, name: str, value: Any, path: YPath) -> Cell:
        try:
            return Cell(check_field(name, value, self.loaded.raw.get(path), self.tables), path)
        except Bad as bad:
            self.bad((*path, *bad.sub), bad.message, bad.choices)
            return Cell(value, path, ok=False)

    def field_name(self, key: Any, path: YPath, where: str) -> bool:
        if key in VARIANT_FIELDS:
            return True
        self.bad(path, f"unknown field {key!r} in {where}", suggest(str(key), VARIANT_FIELDS))
        return False

    def fields(self, value: Any, path: YPath, where: str) -> dict[str, Cell] | None:
        """A mapping of variant fields (defaults / include row / exclude row)."""
        if not isinstance(value, dict):
            self.bad(path, f"expected a mapping of variant fields, got {describe(value)}",
                     "for example {torch: \"2.9.1\", cuda: \"12.8\"}")
            return None
        out = {}
        for key, item in value.items():
            if self.field_name(key, (*path, key), where):
                out[key] = self.cell(key, item, (*path, key))
            else:  # an unknown field poisons the row: whatever it meant is missing from the variant
                out["?" + str(key)] = Cell(item, (*path, key), ok=False)
        return out

    def string(self, value: Any, path: YPath, what: str) -> str | None:
        if isinstance(value, str) and value.strip():
            return value.strip()
        self.bad(path, f"expected {what}, got {describe(value)}")
        return None

    def items(self, value: Any, path: YPath, what: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.bad(path, f"expected a list of {what}, got {describe(value)}")
            return []
        return value

    def mapping(self, value: Any, path: YPath, example: str) -> dict[Any, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.bad(path, f"expected a mapping, got {describe(value)}", f"for example {example}")
            return {}
        return value


def check_document(loaded: Loaded, tables: Tables, base_dir: Path) -> tuple[Schema, list[Problem]]:
    """Check every top-level key of the matrix file (in this order, so problems read top to bottom)."""
    c = _Checker(loaded, tables, base_dir)
    doc, out = loaded.data, Schema()
    out.unknown_keys = _check_top_keys(c, doc)
    _check_name_and_registry(c, doc, out)
    out.gpu_archs = _check_gpu_archs(c, doc)
    if doc.get("gpus") is not None:
        out.gpus = c.cell("gpus", doc["gpus"], ("gpus",))
    if "defaults" in doc:
        out.defaults = c.fields(doc["defaults"], ("defaults",), "defaults") or {}
    if "matrix" in doc:
        out.axes = _check_axes(c, doc["matrix"])
    out.include = _check_rows(c, doc, "include")
    out.exclude = _check_rows(c, doc, "exclude")
    out.ca_certs = _check_ca_certs(c, doc, base_dir)
    out.size_budget = _check_size_budget(c, doc)
    out.layer_limit = _check_layer_limit(c, doc)
    out.perf_min = _check_perf_min(c, doc)
    out.compression = _check_compression(c, doc)
    out.audit = check_audit(c, doc, loaded.line, loaded.file)
    return out, c.problems


def _check_top_keys(c: _Checker, doc: dict[Any, Any]) -> tuple[str, ...]:
    """Unknown top-level keys (returned: they explain a missing matrix), with a did-you-mean or a hint that a
    variant field was written at the top level."""
    unknown: tuple[str, ...] = ()
    for key in doc:
        if key not in TOP_KEYS:
            hint = suggest(str(key), TOP_KEYS)
            near_field = suggest(str(key), VARIANT_FIELDS)
            if key in VARIANT_FIELDS:
                hint = f"{key!r} is a variant field: put it under defaults, a matrix axis or an include row"
            elif not hint.startswith("did") and near_field.startswith("did"):
                hint = f"{near_field} (variant fields go under defaults, a matrix axis or an include row)"
            c.bad((key,), f"unknown key {key!r}", hint)
            unknown += (str(key),)
    return unknown


def _check_name_and_registry(c: _Checker, doc: dict[Any, Any], out: Schema) -> None:
    if "name" not in doc:
        c.bad((), "missing required key 'name'", "the image repository name, e.g. name: pytorch")
    elif (name := c.string(doc["name"], ("name",), "a repository name like 'pytorch'")) is not None:
        try:
            out.name = check_repository_name(name)
        except ReferenceSyntaxError as exc:
            c.bad(("name",), f"{name!r} is not a valid repository name: {exc}")
    if doc.get("registry") not in (None, ""):
        reg = c.string(doc["registry"], ("registry",), "a registry like 'registry.example.internal:5000/ml'")
        if reg is not None:
            try:
                out.registry = check_registry(reg)
            except ReferenceSyntaxError as exc:
                c.bad(("registry",), f"{redact_host(reg)!r} is not a valid registry: {exc}",
                      "host[:port][/path], e.g. registry.example.internal:5000/ml")
    if out.name:
        try:
            check_repository_room(f"{out.registry}/{out.name}" if out.registry else out.name)
        except ReferenceSyntaxError as exc:
            c.bad(("name",), f"{exc}")


def _check_gpu_archs(c: _Checker, doc: dict[Any, Any]) -> tuple[str, ...]:
    archs: list[str] = []
    for i, arch in enumerate(c.items(doc.get("gpu_archs"), ("gpu_archs",), "GPU archs like sm_90")):
        if not isinstance(arch, str) or not ARCH_RE.match(arch):
            c.bad(("gpu_archs", i), f"expected a GPU arch like 'sm_90', got {describe(arch)}",
                  "A100 = sm_80, H100/H200 = sm_90, Blackwell = sm_100/sm_120")
        elif arch in archs:
            c.bad(("gpu_archs", i), f"{arch!r} is listed twice")
        else:
            archs.append(arch)
    return tuple(archs)


def _check_axes(c: _Checker, matrix: Any) -> list[tuple[str, list[Cell]]]:
    """The `matrix:` axes; a bad axis stays in the list (unknown name "?<name>", or a not-ok Cell) so expansion
    keeps the file's shape."""
    axes: list[tuple[str, list[Cell]]] = []
    for axis, values in c.mapping(matrix, ("matrix",), '{torch: ["2.9.1"], cuda: ["12.8"]}').items():
        path = ("matrix", axis)
        if not c.field_name(axis, path, "matrix"):
            # Reported above. When the name is a typo of a field the file sets nowhere else (`cudaa` for `cuda`),
            # the rows are still resolved as if it were that field, so the rest of the file's problems (a Python
            # the torch lacks, ...) come out in the same run instead of after the typo is fixed.
            meant = _meant_field(str(axis), matrix, c)
            if meant is not None and isinstance(values, list) and values:
                axes.append((meant, [c.cell(meant, v, (*path, i)) for i, v in enumerate(values)]))
            else:
                axes.append(("?" + str(axis), [Cell(values, path, ok=False)]))
            continue
        if not isinstance(values, list):
            c.bad(path, f"an axis must be a list of values, got {describe(values)}", f"{axis}: [{values!r}]")
            axes.append((axis, [Cell(values, path, ok=False)]))
        elif not values:
            c.bad(path, "axis is empty, so the matrix has no variants", f"give at least one {axis} value")
            axes.append((axis, []))
        else:
            axes.append((axis, [c.cell(axis, v, (*path, i)) for i, v in enumerate(values)]))
    return axes


def _meant_field(name: str, matrix: dict[Any, Any], c: _Checker) -> str | None:
    """The variant field an unknown axis name is a close typo of, when neither the axes nor `defaults` set it."""
    close = difflib.get_close_matches(name, VARIANT_FIELDS, n=1, cutoff=0.6)  # the did-you-mean of the message
    if not close or close[0] in matrix:
        return None
    defaults = c.loaded.data.get("defaults") if isinstance(c.loaded.data, dict) else None
    if isinstance(defaults, dict) and close[0] in defaults:
        return None
    return close[0]


def _check_rows(c: _Checker, doc: dict[Any, Any], section: str) -> list[tuple[YPath, dict[str, Cell]]]:
    """`include:` or `exclude:` rows, each a mapping of variant fields."""
    rows: list[tuple[YPath, dict[str, Cell]]] = []
    for i, row in enumerate(c.items(doc.get(section), (section,), f"{section} rows")):
        cells = c.fields(row, (section, i), f"an {section} row")
        if cells is not None and not cells:
            c.bad((section, i), f"empty {section} row")
        elif cells is not None:
            rows.append(((section, i), cells))
    return rows


def _check_ca_certs(c: _Checker, doc: dict[Any, Any], base_dir: Path) -> tuple[Path, ...]:
    """CA files, relative to the matrix file; each must exist and hold at least one PEM certificate (only those blocks
    reach the image: files.certificate_blocks)."""
    certs: list[Path] = []
    for i, item in enumerate(c.items(doc.get("ca_certs"), ("ca_certs",), "CA certificate files")):
        if (text := c.string(item, ("ca_certs", i), "a CA file path")) is not None:
            cert = (base_dir / text).resolve()
            if not cert.is_file():
                c.bad(("ca_certs", i), f"CA file not found: {cert}", "paths are relative to the matrix file")
                continue
            try:
                certificate_blocks(cert)
            except FileProblem as exc:
                c.bad(("ca_certs", i), f"CA file {exc}")
                continue
            certs.append(cert)
    return tuple(certs)


def _check_size_budget(c: _Checker, doc: dict[Any, Any]) -> dict[str, int]:
    budget: dict[str, int] = {}
    for flavor, size in c.mapping(doc.get("size_budget"), ("size_budget",), "{runtime: 12GB}").items():
        if flavor not in FLAVORS:
            c.bad(("size_budget", flavor), f"unknown flavor {flavor!r}", suggest(str(flavor), FLAVORS))
            continue
        try:
            budget[flavor] = parse_size(size)
        except ValueError:
            c.bad(("size_budget", flavor), f"expected a size like 7.5GB or 800MiB, got {describe(size)}",
                  "units: B, kB, MB, GB, TB (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024)")
    return budget


def _check_layer_limit(c: _Checker, doc: dict[Any, Any]) -> int | None:
    """`layer_limit: 8GiB`: the largest layer an image may have (registries refuse layers over 10 GB)."""
    if doc.get("layer_limit") is None:
        return None
    value = doc["layer_limit"]
    try:
        size = parse_size(value)
    except ValueError:
        size = 0
    if size <= 0:
        c.bad(("layer_limit",), f"expected a size like 8GiB or 5GB, got {describe(value)}",
              "units: B, kB, MB, GB, TB (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024)")
        return None
    return size
COMPRESSIONS = ("zstd", "gzip")  # push/skopeo.py's choices (the matrix imports no stage)


def _check_compression(c: _Checker, doc: dict[Any, Any]) -> dict[str, str]:
    """`compression: gzip` (every registry this matrix pushes to) or `compression: {HOST[:PORT]: gzip, ...}` (per
    registry; others get zstd): gzip for registries whose pulling runtimes predate zstd (Docker < 23, containerd <
    1.5, older enroot)."""
    value = doc.get("compression")
    if value is None:
        return {}
    choices = " or ".join(COMPRESSIONS)
    if isinstance(value, str):
        if value not in COMPRESSIONS:
            c.bad(("compression",), f"expected {choices}, got {describe(value)}",
                  "gzip for runtimes that predate zstd (Docker < 23, containerd < 1.5, older enroot)")
            return {}
        return {"*": value}
    out: dict[str, str] = {}
    for key, each in c.mapping(value, ("compression",), "gzip, or {registry.example:5000: gzip}").items():
        if not isinstance(key, str) or not key:
            c.bad(("compression", key), f"expected a registry host like 'registry.example:5000', got {describe(key)}")
        elif each not in COMPRESSIONS:
            c.bad(("compression", key), f"expected {choices}, got {describe(each)}")
        else:
            out[key] = str(each)
    return out


def _check_perf_min(c: _Checker, doc: dict[Any, Any]) -> dict[str, float]:
    perf: dict[str, float] = {}
    for key, value in c.mapping(doc.get("perf_min"), ("perf_min",), "{bf16_tflops: 600}").items():
        if not isinstance(key, str) or not _PERF_KEY_RE.match(key):
            c.bad(("perf_min", key), f"expected a metric name like 'bf16_tflops', got {describe(key)}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            c.bad(("perf_min", key), f"expected a positive number, got {describe(value)}")
        else:
            perf[key] = float(value)
    return perf
