"""Inputs hash: what decides whether an image must be rebuilt.

sha256 over the rendered Dockerfile, deterministic build args and labels, every context file, the content of
context folders (wheelhouse) and the parent's inputs hash, so a change to the runtime template changes the runtime
and dev hashes but not base. Volatile inputs (created date, git revision, proxies, credentials) are left out.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

_CACHE: dict[tuple[str, int, int], str] = {}


def file_digest(path: Path) -> str:
    """sha256 of a file, cached per (path, size, mtime) so no-op rebuilds don't re-read big wheels."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _CACHE:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        _CACHE[key] = h.hexdigest()
    return _CACHE[key]


def dir_digest(root: Path) -> str:
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath, name)
            entries.append((str(path.relative_to(root)), file_digest(path)))
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def inputs_hash(
    dockerfile: str,
    build_args: dict[str, str],
    labels: dict[str, str],
    context_files: dict[str, bytes],
    context_dirs: dict[str, Path],
    parent_hash: str | None,
    extra: dict | None = None,
) -> str:
    doc = {
        "dockerfile": hashlib.sha256(dockerfile.encode()).hexdigest(),
        "build_args": sorted(build_args.items()),
        "labels": sorted(labels.items()),
        "files": sorted((name, hashlib.sha256(data).hexdigest()) for name, data in context_files.items()),
        "dirs": sorted((name, dir_digest(Path(path))) for name, path in context_dirs.items()),
        "parent": parent_hash,
        "extra": extra or {},
    }
    return "sha256:" + hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
