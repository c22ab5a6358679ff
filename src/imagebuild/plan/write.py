"""Write a plan's rendered Dockerfiles (one folder per image) and compare a folder with a fresh render.

`render --out DIR` keeps a manifest of the files it wrote (`DIR/.imagebuild-rendered`, one relative path a line), so
the next render removes exactly those it no longer renders (another matrix's images, a dropped variant) and nothing
else that lives in DIR. `render --check` reports every file the render would not write as stale.

The manifest is only a claim (anyone can edit it): a line is acted on only when it names a regular file inside DIR
reached without a symbolic link (`files.regular_file_inside`); every file is written by `files.write_inside`, so a
link planted in DIR (a folder or a file) is never written through.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from imagebuild.files import read_bounded_text, regular_file_inside, write_inside
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
    if not regular_file_inside(out, MANIFEST):
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
        if rel not in files and regular_file_inside(out, rel):  # a link or a folder was not written by a render
            os.unlink(out / rel)
            _remove_empty_parents(out, rel)
    for rel, data in files.items():
        if not _holds(out, rel, data):
            write_inside(out, rel, data, "render --out")
    manifest = ("\n".join([_HEADER, *sorted(p.as_posix() for p in files)]) + "\n").encode()
    if not _holds(out, Path(MANIFEST), manifest):
        write_inside(out, MANIFEST, manifest, "render --out")
    return len(files)


def _holds(out: Path, rel: Path, data: bytes) -> bool:
    """Does OUT already hold exactly `data` at `rel`, as a regular file of its own (not a link, not a hard link to a
    file elsewhere, which rewriting must replace rather than leave shared)?"""
    if not regular_file_inside(out, rel):
        return False
    st = os.lstat(out / rel)
    if st.st_nlink != 1 or not stat.S_ISREG(st.st_mode) or st.st_size != len(data):
        return False
    return (out / rel).read_bytes() == data


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
        if not os.path.lexists(target):
            problems.append(f"{target}: missing")
        elif not regular_file_inside(out, rel):  # never read through a link, never open a FIFO (it would block)
            problems.append(f"{target}: not a regular file of the folder (a link or a special file); a render "
                            "replaces it")
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
