"""The last plan of a matrix, kept between processes, so that a run whose inputs did not change skips loading,
resolving, rendering and hashing (most of a no-op `build`'s own work; jinja2 and the YAML loader are not even
imported then).

A plan is a pure function of files and arguments: the matrix file, its lock, the compatibility data and code of
this imagebuild installation, the templates, the CA files and context folders (wheelhouse) the plan's images use,
and the arguments (BuildInputs, registry, render folder, whether the lock is used). The entry stores a fingerprint
of all of them: the small files a user edits (matrix, lock, templates, CA files) by content, since two writes within
one clock tick keep the mtime; the package's code and data and the context folders (wheelhouse) by (size, mtime,
inode), as Python's own bytecode cache and the file-digest cache do; the arguments by a digest (credentials
included, so a changed password re-plans; only the digest is stored, never the value). Any difference, or any file that cannot be read,
is a miss and the plan is made again. One entry per (matrix, registry, render folder, lock use), replaced on each
miss: $IMAGEBUILD_CACHE_DIR/plans/ (else $XDG_CACHE_HOME/imagebuild, else ~/.cache/imagebuild). A cache only: an
unwritable folder means planning again next time. The entry is a pickle of the Plan, written and read only by this
user, like the bytecode caches of other tools; a plan that carries credentials (secret build args) is never written.
IMAGEBUILD_NO_PLAN_CACHE=1 turns the cache off.

Beside each plan, the same way: which backends the matrix's rows name (`matrix_backends`), the question `build
--backend auto` asks before anything is planned, so a no-op does not load and check the matrix file for it either.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from imagebuild import __version__
from imagebuild.inputs import BuildInputs
from imagebuild.models import Plan

FORMAT = "1"  # bump when the entry's layout changes
_PACKAGE = Path(__file__).resolve().parent.parent  # src/imagebuild: code and packaged data
# where render finds the templates (render.templates_dir: the wheel's _templates, else the checkout's templates/);
# named here so that a cache hit does not import render (and jinja2) to ask
_TEMPLATES = (_PACKAGE / "_templates", _PACKAGE.parent.parent / "templates")


def _root() -> Path:
    root = os.environ.get("IMAGEBUILD_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "imagebuild")
    return Path(root) / "plans"


def enabled() -> bool:
    return os.environ.get("IMAGEBUILD_NO_PLAN_CACHE") != "1"


def _signature(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"


def _content(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tree(root: Path) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            yield Path(dirpath, name)


def _files(matrix: Path, extra: Iterable[Path]) -> dict[str, str]:
    """path -> signature of every file a plan of `matrix` depends on (OSError: one of them cannot be read)."""
    out = {str(p): _signature(p) for p in _tree(_PACKAGE)}
    for templates in _TEMPLATES:
        out.update({str(p): _content(p) for p in (_tree(templates) if templates.is_dir() else ())})
    lock = matrix.with_suffix(".lock")  # lock.lock_path, without importing lock (and packaging) on a hit
    out[str(matrix)] = _content(matrix)
    out[str(lock)] = _content(lock) if lock.is_file() else "absent"
    for p in extra:  # a context folder (wheelhouse: big files) by signature, a CA file by content
        out.update({str(f): _signature(f) for f in _tree(p)} if p.is_dir() else {str(p): _content(p)})
    return out


def _arguments(matrix: str, inputs: BuildInputs, registry: str | None, render_dir: Path | None,
               use_lock: bool) -> str:
    return hashlib.sha256(repr((FORMAT, __version__, matrix, inputs, registry, render_dir, use_lock)).encode()
                          ).hexdigest()


def _entry_path(matrix: Path, registry: str | None, render_dir: Path | None, use_lock: bool) -> Path:
    key = repr((str(matrix.resolve()), registry, str(render_dir), use_lock, os.getcwd(), str(_PACKAGE)))
    return _root() / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".pickle")


def _used_files(plan: Plan, inputs: BuildInputs) -> list[Path]:
    """The files outside the matrix and the package that the plan read: CA files and context folders."""
    used = {Path(p) for p in inputs.ca_certs}
    for img in plan.images:
        used.update(Path(p) for p in img.variant.ca_certs)
        used.update(Path(p) for p in img.context_dirs.values())
        if img.te_wheel is not None:
            used.update(Path(p) for p in img.te_wheel.context_dirs.values())
    return sorted(used)


def load(matrix: str | Path, inputs: BuildInputs, registry: str | None, render_dir: Path | None,
         use_lock: bool) -> Plan | None:
    """The cached plan when none of its inputs changed, else None."""
    if not enabled():
        return None
    try:
        with _entry_path(Path(matrix), registry, render_dir, use_lock).open("rb") as fh:
            entry = pickle.load(fh)
        if entry["arguments"] != _arguments(str(matrix), inputs, registry, render_dir, use_lock):
            return None
        if entry["files"] != _files(Path(matrix), [Path(p) for p in entry["used"]]):
            return None
        plan = entry["plan"]
    except (OSError, EOFError, KeyError, TypeError, AttributeError, ImportError, pickle.UnpicklingError):
        return None
    return plan if isinstance(plan, Plan) else None


def save(plan: Plan, matrix: str | Path, inputs: BuildInputs, registry: str | None, render_dir: Path | None,
         use_lock: bool) -> None:
    secrets = any(i.secret_build_args or (i.te_wheel and i.te_wheel.secret_build_args) for i in plan.images)
    if not enabled() or secrets:
        return
    used = _used_files(plan, inputs)
    try:
        entry = {"arguments": _arguments(str(matrix), inputs, registry, render_dir, use_lock),
                 "files": _files(Path(matrix), used), "used": [str(p) for p in used], "plan": plan}
        path = _entry_path(Path(matrix), registry, render_dir, use_lock)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".plan-")
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(entry, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        pass  # a cache only


def matrix_backends(matrix: str | Path, read: Callable[[], Iterable[str]]) -> set[str]:
    """The `backend` values the matrix file's rows name: `read()` (which loads and checks the file) once, then
    from the cache while the fingerprint of what a plan of it is made from (the matrix and its lock by content, the
    package's code and data, the templates) stays the same. Whatever `read` raises (a matrix that does not parse)
    is raised as before: a file that changed is read again."""
    path = Path(matrix)
    if not enabled():
        return set(read())
    key = repr(("backends", str(path.resolve()), os.getcwd(), str(_PACKAGE)))
    entry_path = _root() / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".backends.json")
    arguments = hashlib.sha256(repr((FORMAT, __version__, str(matrix))).encode()).hexdigest()
    try:
        files = _files(path, [])
    except OSError:  # the matrix cannot be read: `read` says so
        return set(read())
    try:
        entry = json.loads(entry_path.read_text(encoding="utf-8"))
        names = entry["backends"]
        if entry["arguments"] == arguments and entry["files"] == files and isinstance(names, list) \
                and all(isinstance(n, str) for n in names):
            return set(names)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = set(read())
    try:
        entry_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry_path.parent, prefix=".backends-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"arguments": arguments, "files": files, "backends": sorted(found)}, fh)
        os.replace(tmp, entry_path)
    except OSError:
        pass  # a cache only
    return found
