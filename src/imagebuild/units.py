"""Byte sizes as people read them, in powers of 1000 like docker and registries (sizes are parsed by
`imagebuild.matrix.parse_size`). One formatter for reports, size budgets, the build summary and the disk check."""

from __future__ import annotations


def format_size(n: int | float | None, digits: int = 2) -> str:
    """`1_500_000` -> `1.50 MB`, `999` -> `999 B`, None -> `–`; `digits` decimals above 1 kB."""
    if n is None:
        return "–"
    for unit, f in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if abs(n) >= f:
            return f"{n / f:.{digits}f} {unit}"
    return f"{n} B"
