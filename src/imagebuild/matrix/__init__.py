"""The matrix file: YAML with line numbers, its schema, and defaults/matrix/include/exclude expansion.
(Image references in it are checked with `imagebuild.oci`.)

    load_matrix(path) -> MatrixDoc      find_matrix(name) -> Path      parse_matrix(text, file) -> MatrixDoc

The names below load their module when first asked for: finding the matrix file (every command) loads neither the
YAML loader, the schema nor `packaging`, so a run that takes its plan from the cache (the whole-process no-op)
never loads them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from imagebuild.matrix.doc import MatrixDoc, display_name, load_matrix, parse_matrix
    from imagebuild.matrix.expand import RawVariant
    from imagebuild.matrix.fields import REQUIRED_FIELDS, VARIANT_FIELDS
    from imagebuild.matrix.find import available, find_matrix
    from imagebuild.matrix.schema import TOP_KEYS, parse_size

# name -> the module of this package that defines it
_WHERE = {
    "MatrixDoc": "doc", "display_name": "doc", "load_matrix": "doc", "parse_matrix": "doc",
    "RawVariant": "expand",
    "REQUIRED_FIELDS": "fields", "VARIANT_FIELDS": "fields",
    "available": "find", "find_matrix": "find",
    "TOP_KEYS": "schema", "parse_size": "schema",
}


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # asked once
    return value


__all__ = [
    "REQUIRED_FIELDS",
    "TOP_KEYS",
    "VARIANT_FIELDS",
    "MatrixDoc",
    "RawVariant",
    "available",
    "display_name",
    "find_matrix",
    "load_matrix",
    "parse_matrix",
    "parse_size",
]
