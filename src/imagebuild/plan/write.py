"""Write a plan's rendered Dockerfiles (one folder per image) and compare a folder with a fresh render."""

from __future__ import annotations

from pathlib import Path

from imagebuild.models import Plan


def _expected_files(plan: Plan) -> dict[Path, bytes]:
    files: dict[Path, bytes] = {}
    for image in plan.images:
        folder = Path(image.id)
        files[folder / "Dockerfile"] = image.dockerfile.encode()
        for name, data in sorted(image.context_files.items()):
            files[folder / name] = data
    return files


def write_rendered(plan: Plan, out: Path) -> int:
    files = _expected_files(plan)
    for rel, data in files.items():
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_bytes() != data:
            target.write_bytes(data)
    return len(files)


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
        for path in sorted(out.rglob("*")):
            if path.is_file() and path.relative_to(out) not in expected:
                problems.append(f"{path}: stale (not rendered any more)")
    return problems
