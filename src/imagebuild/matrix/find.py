"""`--matrix h100.yaml`: the file itself, else images/h100.yaml, else the matrices shipped with imagebuild."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from imagebuild.errors import MatrixError, Problem


def shipped_dirs() -> list[Path]:
    """Where shipped matrices live: the wheel's `imagebuild/_images` (pyproject force-includes the repo's images/
    there); in a source checkout, `<repo>/images`."""
    dirs = []
    packaged = Path(str(resources.files("imagebuild").joinpath("_images")))
    if packaged.is_dir():
        dirs.append(packaged)
    checkout = Path(__file__).resolve().parents[3] / "images"  # src/imagebuild/matrix/find.py -> repo
    if checkout.is_dir() and checkout not in dirs:
        dirs.append(checkout)
    return dirs


def available() -> list[str]:
    names: set[str] = set()
    for folder in [Path.cwd() / "images", *shipped_dirs()]:
        if folder.is_dir():
            names.update(p.name for p in folder.glob("*.yaml"))
    return sorted(names)


def find_matrix(name: str | Path) -> Path:
    """Resolve a `--matrix` argument to a file; raises MatrixError listing the available matrices.

    `h100.yaml` -> ./h100.yaml, else ./images/h100.yaml, else the shipped one; `h100` works too.
    """
    given = Path(name)
    names = [given] if given.suffix == ".yaml" or given.suffix == ".yml" else [given, given.with_suffix(".yaml")]
    for candidate in names:
        if candidate.is_file():
            return candidate
    if not given.is_absolute() and len(given.parts) == 1:  # a bare name: look where matrices live
        for base in [Path("images"), *shipped_dirs()]:
            for candidate in names:
                if (base / candidate.name).is_file():
                    return base / candidate.name
    return _missing(str(name), available())


def _missing(name: str, names: list[str]) -> Path:
    choices = "available matrices: " + ", ".join(names) if names else "no matrices found under ./images"
    raise MatrixError([Problem(name, 0, "", "no such matrix file (looked in ., ./images and the shipped matrices)",
                               choices)])
