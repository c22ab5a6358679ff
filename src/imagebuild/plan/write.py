"""Write a plan's rendered Dockerfiles (one folder per image) and compare a folder with a fresh render.

`render --out DIR` keeps a manifest of the files it wrote (`DIR/.imagebuild-rendered`, one relative path a line), so
the next render removes exactly those it no longer renders (another matrix's images, a dropped variant) and nothing
else that lives in DIR. `render --check` reports every file the render would not write as stale.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from imagebuild.files import read_bounded_text
from imagebuild.models import Plan

MANIFEST = ".imagebuild-rendered"
_HEADER = "# files `imagebuild render` wrote here; the next render removes those it no longer writes"


def _expected_files(plan: Plan) -> dict[Path, bytes]:
    files: dict[Path, bytes] = {}
    for image in plan.images:
        folder = Path(image.id)
        files[folder / "Dockerfile"] = image.dockerfile.encode()
        for name, data in sorted(image.context_files.items()):
            files[folder / name] = data
    return files


def _written_before(out: Path) -> list[Path]:
    """The relative paths the last render listed; only plain relative paths inside OUT are trusted."""
    if not (out / MANIFEST).is_file():
        return []
    rels = []
    for line in read_bounded_text(out / MANIFEST, "render manifest").splitlines():
        rel = Path(line.strip())
        if line.strip() and not line.startswith("#") and not rel.is_absolute() and ".." not in rel.parts:
            rels.append(rel)
    return rels


def write_rendered(plan: Plan, out: Path) -> int:
    files = _expected_files(plan)
    for rel in _written_before(out):
        if rel not in files:
            with contextlib.suppress(FileNotFoundError):
                (out / rel).unlink()
            _remove_empty_parents(out, rel)
    for rel, data in files.items():
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_bytes() != data:
            target.write_bytes(data)
    manifest = "\n".join([_HEADER, *sorted(p.as_posix() for p in files)]) + "\n"
    if not (out / MANIFEST).is_file() or (out / MANIFEST).read_text(encoding="utf-8") != manifest:
        (out / MANIFEST).write_text(manifest, encoding="utf-8")
    return len(files)


def _remove_empty_parents(out: Path, rel: Path) -> None:
    for parent in rel.parents:
        if parent == Path("."):
            return
        try:
            (out / parent).rmdir()
        except OSError:  # not empty (or already gone): stop
            return


def diff_rendered(plan: Plan, out: Path) -> list[str]:
    """Paths that differ, are missing, or are stale (present on disk but no longer rendered)."""
    expected = _expected_files(plan)
    problems = []
    for rel, data in sorted(expected.items()):
        target = out / rel
        if not target.exists():
            problems.append(f"{target}: missing")
        elif target.read_bytes() != data:
            problems.append(f"{target}: differs")
    if out.exists():
        ours = set(_written_before(out))
        for path in sorted(out.rglob("*")):
            rel = path.relative_to(out)
            if path.is_file() and rel not in expected and rel != Path(MANIFEST):
                why = "a render wrote it; the next one removes it" if rel in ours else \
                    "not written by `imagebuild render` here (no manifest line): delete it by hand"
                problems.append(f"{path}: stale ({why})")
    return problems
