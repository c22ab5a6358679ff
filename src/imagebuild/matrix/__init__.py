"""The matrix file: YAML with line numbers, its schema, and defaults/matrix/include/exclude expansion.
(Image references in it are checked with `imagebuild.oci`.)

    load_matrix(path) -> MatrixDoc      find_matrix(name) -> Path      parse_matrix(text, file) -> MatrixDoc
"""

from imagebuild.matrix.doc import MatrixDoc, display_name, load_matrix, parse_matrix
from imagebuild.matrix.expand import RawVariant
from imagebuild.matrix.fields import REQUIRED_FIELDS, VARIANT_FIELDS
from imagebuild.matrix.find import available, find_matrix
from imagebuild.matrix.schema import TOP_KEYS, parse_size

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
