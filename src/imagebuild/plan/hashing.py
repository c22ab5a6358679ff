"""Inputs hash: what decides whether an image must be rebuilt.

sha256 over the rendered Dockerfile, deterministic build args and labels, every context file, the content of
context folders (wheelhouse) and the parent's inputs hash, so a change to the runtime template changes the runtime
and dev hashes but not base. Volatile inputs (created date, git revision, proxies, credentials) are left out.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

_CACHE: dict[str, str] | None = None
_DIRTY = False


def _cache_path() -> Path:
    root = os.environ.get("IMAGEBUILD_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "imagebuild")
    return Path(root) / "file-digests.json"


def _cache() -> dict[str, str]:
    global _CACHE
    if _CACHE is None:
        try:
            _CACHE = json.loads(_cache_path().read_text())
        except (OSError, ValueError, RecursionError):
            _CACHE = {}
        if not isinstance(_CACHE, dict):  # a damaged cache is no cache
            _CACHE = {}
    return _CACHE


def save_cache() -> None:
    """Persist digests of big context files (wheelhouse) so the next process doesn't re-read them."""
    global _DIRTY
    if not _DIRTY or _CACHE is None:
        return
    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".digests-")
        with os.fdopen(fd, "w") as fh:
            json.dump(_CACHE, fh)
        os.replace(tmp, path)
        _DIRTY = False
    except OSError:
        pass  # a cache only: a read-only home just means hashing again next time


def file_digest(path: Path) -> str:
    """sha256 of a file, cached per (path, inode, size, mtime): a no-op rebuild doesn't re-read big wheels."""
    global _DIRTY
    st = path.stat()
    key = f"{path.resolve()}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}"
    cache = _cache()
    if key not in cache:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        cache[key] = h.hexdigest()
        _DIRTY = st.st_size >= 1 << 20 or _DIRTY  # only worth persisting for big files
    return cache[key]


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
    extra: dict[str, Any] | None = None,
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
