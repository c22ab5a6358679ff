"""Where plan outputs go by default (its own module: the plan cache needs it without loading the assembly)."""

from __future__ import annotations

from pathlib import Path


def default_render_dir(matrix_path: str | Path) -> Path:
    """Where `imagebuild render` writes by default: rendered/<matrix stem>/ under the working directory."""
    return Path("rendered") / Path(matrix_path).stem
