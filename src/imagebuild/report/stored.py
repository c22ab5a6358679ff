"""The report files as they lie on disk, which may be damaged: a truncated build-report.json (a full disk, a killed
CI job), a hand-edited one, a history.jsonl that ends in half a line.

`load_report` reads build-report.json within a size limit and checks the shape of every field the Markdown, JUnit
and history writers use (each row's `tests`: a smokeresult.SmokeResult of this schema version; its `phases`, when
there are any: phases.Phase rows; a report written before phases has none and reads as it is), so a damaged report
is one `error:` line naming the file and the field, never a traceback from deep in the renderer. `append_history`
first ends a torn last line, so the new entry is a line of its own and every complete entry before it stays readable.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

from imagebuild.errors import UsageError
from imagebuild.files import MAX_INPUT_BYTES, FileProblem, read_bounded_text
from imagebuild.phases import PHASES_KEY, PhaseError, phases_from_json
from imagebuild.smokeresult import SmokeResult


class ReportError(UsageError):
    """A report file that cannot be used (exit 2)."""


_NUM = (int, float)
_OS = (str, type(None))


class _Opt:
    def __init__(self, spec: object) -> None:
        self.spec = spec


# what the writers index, slice, format as numbers or iterate; other fields are only printed (any JSON value)
_PUSH = {"status": _OS, "digest": _OS, "error": _OS, "seconds": (*_NUM, type(None)), "tags": _Opt([(str,)])}
_TESTS = {"seconds": (*_NUM, type(None)), "checks": _Opt([{}])}
_SBOM = {"path": (str,), "sha256": _OS}
_AUDIT = {"image_id": (str,), "at": _OS, "security_fixes": (int, type(None)), "python": (int, type(None)),
          "violations": _Opt((int,)), "not_checked": _Opt([(str,)])}
_COUNTS = {"added": (object,), "removed": (object,), "changed": (object,)}
_DIFF = {"os": _Opt(_COUNTS), "python": _Opt(_COUNTS)}
_PHASE = {"kind": (str,), "name": (str,), "seconds": (*_NUM, type(None)), "cached": (bool, type(None))}
_ROW = {"tag": (str,), "status": _OS, "source": _OS, "image_id": _OS, "error": _OS, "size": (*_NUM, type(None)),
        "build_seconds": (*_NUM, type(None)), "tests": _Opt(_TESTS), "push": _Opt(_PUSH), "sbom": _Opt(_SBOM),
        "diff": _Opt(_DIFF), "layers": _Opt([{"size": (*_NUM, type(None)), "created_by": _OS}]),
        "env_layers": _Opt([{"tier": (str,), "holds": _OS, "size": (*_NUM, type(None)), "over_limit": _Opt((bool,))}]),
        "versions": _Opt({}), "audit": _Opt(_AUDIT), "gpus": _OS, "min_driver": _OS,
        PHASES_KEY: _Opt([_PHASE])}  # absent or null: a report written before phases were measured
_REQUIRED = {id(_ROW): ("tag",), id(_PHASE): ("kind", "name"), id(_AUDIT): ("image_id", "security_fixes", "python"), id(_SBOM): ("path",), id(_COUNTS): ("added", "removed", "changed")}
_DOC = {"schema": (int,), "run": _Opt({"steps": _Opt([(str,)])}), "matrix": _OS, "registry": _OS, "images": [_ROW]}


_NAMES = {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null", int: "a number",
          float: "a number"}


def _kind(value: object) -> str:
    return _NAMES.get(type(value), "a value")


def _shape(value: object, spec: object, where: str) -> str | None:
    """Why `value` does not fit `spec` (a tuple of types, _Opt, a {key: spec} object, a [spec] list), or None."""
    if isinstance(spec, _Opt):
        return None if value is None else _shape(value, spec.spec, where)
    if isinstance(spec, tuple):
        if isinstance(value, spec) and not (isinstance(value, bool) and bool not in spec and object not in spec):
            return None
        wanted = " or ".join(dict.fromkeys(_NAMES.get(t, "a value") for t in spec))
        return f"{where}: expected {wanted}, got {_kind(value)}"
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{where}: expected a list, got {_kind(value)}"
        for n, item in enumerate(value):
            if (why := _shape(item, spec[0], f"{where}[{n}]")) is not None:
                return why
        return None
    assert isinstance(spec, dict)
    if not isinstance(value, dict):
        return f"{where}: expected an object, got {_kind(value)}"
    for key in _REQUIRED.get(id(spec), ()):
        if key not in value:
            return f"{where}: lacks {key!r}"
    for key, sub in spec.items():
        if key in value and (why := _shape(value[key], sub, key if where == "the document" else f"{where}.{key}")) \
                is not None:
            return why
    return None


def check_report(doc: object) -> str | None:
    """Why a parsed build-report.json is not one the writers can read, or None."""
    return _shape(doc, {**_DOC, "images": _Opt([_ROW])}, "the document")


def load_report(path: Path, empty: dict[str, Any]) -> dict[str, Any]:
    """The JSON document at `path` (`empty` when there is none); ReportError when it is damaged."""
    if not path.is_file():
        return empty
    hint = "the next build/test/push run of this matrix replaces it"
    try:
        doc = json.loads(read_bounded_text(path, "report", MAX_INPUT_BYTES))
    except FileProblem as exc:
        raise ReportError(f"{exc}; {hint}") from None
    except RecursionError:
        raise ReportError(f"{path}: not a build report (nested too deeply); {hint}") from None
    except ValueError as exc:
        raise ReportError(f"{path}: not a build report (not JSON: {exc}); {hint}") from None
    if (why := check_report(doc)) is not None:
        raise ReportError(f"{path}: not a build report this tool wrote ({why}); {hint}")
    assert isinstance(doc, dict)
    for n, row in enumerate(doc.get("images") or []):  # each smoke result: of this schema version, typed
        if row.get("tests"):
            SmokeResult.from_json(row["tests"], f"{path}: images[{n}].tests")
        try:  # typed (phases.py): what the shape above lets through (a negative or endless number of seconds)
            phases_from_json(row.get(PHASES_KEY), f"{path}: images[{n}].{PHASES_KEY}")
        except PhaseError as exc:
            raise ReportError(f"{exc}; {hint}") from None
    doc.setdefault("images", [])
    doc.setdefault("run", {})
    if doc["images"] is None:
        doc["images"] = []
    if doc["run"] is None:
        doc["run"] = {}
    return doc


def append_history(path: Path, line: str) -> None:
    """Append one JSON line; a file that ends in a partial line (a run killed while writing) gets its newline
    first, so the torn entry stays one bad line and every complete one before and after stays whole."""
    try:  # never through a link planted at the name ("a" would append to whatever it points at)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        raise ReportError(f"{path}: cannot append to the history ({why})") from None
    with os.fdopen(fd, "r+b") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
        fh.write(line.encode("utf-8") + b"\n")
