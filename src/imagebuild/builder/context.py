"""Build contexts as tar files: the rendered Dockerfile, the plan's context files and folders (wheelhouse).

Deterministic: sorted entries, fixed mtime, uid/gid 0, normalised modes, so the engine's cache sees the same
context for the same plan. Small contexts stay in memory; big ones (a wheelhouse) spill to a temporary file.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import IO

from imagebuild.models import ImagePlan

MTIME = 0  # 1970-01-01: the image's own dates come from the CREATED build arg, never from file times
SPOOL_BYTES = 64 * 1024 * 1024


def file_mode(data: bytes) -> int:
    """A context file's mode: executable when it is a script (#!), else 0644 (bake.py writes the same)."""
    return 0o755 if data.startswith(b"#!") else 0o644


def _clean(rel: str) -> str:
    p = PurePosixPath(rel.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ValueError(f"context path escapes the build context: {rel!r}")
    return str(p)


def _info(name: str, size: int = 0, mode: int = 0o644, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.type, ti.mtime = size, mode, kind, MTIME
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def _add_dir(tar: tarfile.TarFile, ctx: str, root: Path, seen: set[str]) -> None:
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"context folder {root} (for {ctx}/) does not exist")
    _add_parents(tar, ctx, seen)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames.sort()
        rel_dir = Path(dirpath).relative_to(root)
        for name in dirnames:
            arc = str(PurePosixPath(ctx, *rel_dir.parts, name))
            if arc not in seen:
                seen.add(arc)
                tar.addfile(_info(arc, mode=0o755, kind=tarfile.DIRTYPE))
        for name in sorted(filenames):
            src = Path(dirpath, name)
            st = src.stat()  # follows symlinks: the context carries content, not links
            if not stat.S_ISREG(st.st_mode):
                continue
            arc = str(PurePosixPath(ctx, *rel_dir.parts, name))
            mode = 0o755 if st.st_mode & 0o111 else 0o644
            with open(src, "rb") as fh:
                tar.addfile(_info(arc, st.st_size, mode), fh)
            seen.add(arc)


def _add_parents(tar: tarfile.TarFile, rel: str, seen: set[str]) -> None:
    parts = PurePosixPath(rel).parts
    for i in range(1, len(parts) + 1):
        d = str(PurePosixPath(*parts[:i]))
        if d not in seen:
            seen.add(d)
            tar.addfile(_info(d, mode=0o755, kind=tarfile.DIRTYPE))


def build_context(image: ImagePlan, extra_files: dict[str, bytes] | None = None,
                  extra_dirs: dict[str, Path] | None = None) -> IO[bytes]:
    """A rewound binary file object holding the tar context of `image` (close it when done). `extra_dirs`: folders
    the builder adds that are not plan inputs (the cached TE wheel, whose key is in the plan instead)."""
    return tar_context(image.dockerfile, {**image.context_files, **(extra_files or {})},
                       {**image.context_dirs, **(extra_dirs or {})})


def tar_context(dockerfile: str, context_files: dict[str, bytes], context_dirs: dict[str, Path]) -> IO[bytes]:
    """A rewound tar of a Dockerfile, files (relative path -> bytes) and host folders (context path -> folder)."""
    files: dict[str, bytes] = {"Dockerfile": dockerfile.encode()}
    for rel, data in context_files.items():
        rel = _clean(rel)
        if rel == "Dockerfile":
            raise ValueError("context_files may not replace the rendered Dockerfile")
        files[rel] = data if isinstance(data, bytes) else str(data).encode()
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) if context_dirs else io.BytesIO()
    seen: set[str] = set()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(files):
            parent = str(PurePosixPath(rel).parent)
            if parent != ".":
                _add_parents(tar, parent, seen)
            data = files[rel]
            tar.addfile(_info(rel, len(data), file_mode(data)), io.BytesIO(data))
            seen.add(rel)
        for ctx in sorted(context_dirs):
            _add_dir(tar, _clean(ctx), context_dirs[ctx], seen)
    out.seek(0)
    return out
