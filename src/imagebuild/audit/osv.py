"""An OSV database of Python advisories, read from a folder of OSV JSON documents or the OSV PyPI export
(`PyPI/all.zip`: one OSV document per member), and OSV's range evaluation (https://ossf.github.io/osv-schema/,
"Evaluation") under PEP 440 ordering.

Reading never raises for one bad document: a member that is not UTF-8 JSON, has the wrong types, a path-traversal
name or is larger than MAX_DOCUMENT is kept as a `Damaged` entry with its name (and, where it still names them, the
PyPI packages it was about), so a damaged database is never read as a clean one. A source that cannot be read at
all (missing, a truncated or non-zip file) raises `OsvSourceError` with one line.
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from imagebuild.audit.cvss import cvss3_rating

MAX_DOCUMENT = 4 * 1024 * 1024  # one OSV document; the largest real PyPI entries are tens of KiB
MAX_MEMBERS = 500_000  # the PyPI export holds ~20k documents
ECOSYSTEM = "PyPI"
EVENT_KINDS = ("introduced", "fixed", "last_affected", "limit")


class OsvSourceError(Exception):
    """The OSV source as a whole cannot be read (one line, naming the path)."""


@dataclass(frozen=True)
class Event:
    kind: str  # introduced | fixed | last_affected | limit
    value: str


@dataclass(frozen=True)
class Range:
    type: str  # ECOSYSTEM | SEMVER | GIT
    events: tuple[Event, ...]


@dataclass(frozen=True)
class Affected:
    package: str  # PEP 503 normalised name
    ranges: tuple[Range, ...]
    versions: tuple[str, ...]


@dataclass(frozen=True)
class Advisory:
    id: str
    modified: str
    aliases: tuple[str, ...]
    summary: str
    severity: str  # low | medium | high | critical | unknown
    affected: tuple[Affected, ...]  # PyPI only
    document: str  # the file or zip member it came from


@dataclass(frozen=True)
class Damaged:
    name: str  # file or zip member
    why: str
    packages: tuple[str, ...] = ()  # PyPI packages (normalised) it still names, where it could be read that far


@dataclass
class OsvDatabase:
    source: str  # the path read (a folder or a zip)
    kind: str  # "folder" | "zip"
    documents: int = 0
    withdrawn: int = 0
    other_ecosystems: int = 0  # documents naming no PyPI package (ignored)
    newest_modified: str = ""
    by_package: dict[str, list[Advisory]] = field(default_factory=dict)
    damaged: list[Damaged] = field(default_factory=list)

    def advisories(self, name: str) -> list[Advisory]:
        return self.by_package.get(canonicalize_name(name), [])

    def damaged_for(self, name: str) -> list[Damaged]:
        key = canonicalize_name(name)
        return [d for d in self.damaged if key in d.packages]


# ---- reading ---------------------------------------------------------------------------------------------------


def load_osv(path: str | Path) -> OsvDatabase:
    """The PyPI advisories under `path`: a zip (the OSV export), a folder holding `PyPI/all.zip` or `all.zip`, or a
    folder of `*.json` OSV documents (read recursively, symbolic links not followed)."""
    p = Path(path)
    if not p.exists():
        raise OsvSourceError(f"{p}: no such OSV database (a folder of OSV JSON files or the PyPI export all.zip)")
    if p.is_dir():
        for zipped in (p / "PyPI" / "all.zip", p / "all.zip"):
            if zipped.is_file():
                return _load_zip(zipped)
        return _load_folder(p)
    return _load_zip(p)


def _load_folder(root: Path) -> OsvDatabase:
    db = OsvDatabase(source=str(root), kind="folder")
    count = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            if not name.endswith(".json"):
                continue
            full = Path(dirpath) / name
            rel = str(full.relative_to(root))
            count += 1
            if count > MAX_MEMBERS:
                raise OsvSourceError(f"{root}: more than {MAX_MEMBERS} OSV documents: not an OSV export")
            if full.is_symlink() or not full.is_file():
                db.damaged.append(Damaged(rel, "not a regular file (a link or a special file)"))
                continue
            try:
                with open(full, "rb") as f:
                    data = f.read(MAX_DOCUMENT + 1)
            except OSError as exc:
                db.damaged.append(Damaged(rel, f"cannot be read ({exc.strerror or exc})"))
                continue
            _add_document(db, rel, data)
    if db.documents == 0 and not db.damaged:
        raise OsvSourceError(f"{root}: no OSV JSON documents (*.json) in this folder")
    return db


def _load_zip(path: Path) -> OsvDatabase:
    db = OsvDatabase(source=str(path), kind="zip")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise OsvSourceError(f"{path}: not a readable OSV export zip ({why})") from None
    with archive:
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise OsvSourceError(f"{path}: more than {MAX_MEMBERS} members: not an OSV export")
        for info in members:
            if info.is_dir():
                continue
            name = info.filename
            if _unsafe_name(name):
                db.damaged.append(Damaged(name, "unsafe member name (absolute or '..'): not read"))
                continue
            if not name.endswith(".json"):
                continue
            if info.file_size > MAX_DOCUMENT:
                db.damaged.append(Damaged(name, f"larger than {MAX_DOCUMENT} bytes: not read"))
                continue
            try:
                with archive.open(info) as f:
                    data = f.read(MAX_DOCUMENT + 1)  # the header's size may lie
            except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError,
                    RuntimeError) as exc:
                db.damaged.append(Damaged(name, f"cannot be read from the zip ({exc or type(exc).__name__})"))
                continue
            _add_document(db, name, data)
    if db.documents == 0 and not db.damaged:
        raise OsvSourceError(f"{path}: no OSV JSON documents in this zip")
    return db


def _unsafe_name(name: str) -> bool:
    parts = name.replace("\\", "/").split("/")
    return name.startswith(("/", "\\")) or ".." in parts or (len(name) > 1 and name[1] == ":") or "\x00" in name


def _add_document(db: OsvDatabase, name: str, data: bytes) -> None:
    if len(data) > MAX_DOCUMENT:
        db.damaged.append(Damaged(name, f"larger than {MAX_DOCUMENT} bytes: not read"))
        return
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        db.damaged.append(Damaged(name, "not UTF-8 text"))
        return
    except ValueError as exc:
        db.damaged.append(Damaged(name, f"not JSON ({str(exc).splitlines()[0][:80]})"))
        return
    except RecursionError:
        db.damaged.append(Damaged(name, "not JSON (nested too deeply)"))
        return
    try:
        advisory, withdrawn = parse_advisory(doc, name)
    except _Shape as exc:
        db.damaged.append(Damaged(name, f"not an OSV document: {exc}", _packages_named(doc)))
        return
    db.documents += 1
    if withdrawn:
        db.withdrawn += 1
        return
    if advisory.modified > db.newest_modified:
        db.newest_modified = advisory.modified
    if not advisory.affected:
        db.other_ecosystems += 1
        return
    for pkg in sorted({a.package for a in advisory.affected}):
        db.by_package.setdefault(pkg, []).append(advisory)


class _Shape(Exception):
    pass


def _get(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str, required: bool = False) -> Any:
    if key not in obj or obj[key] is None:
        if required:
            raise _Shape(f"{where}{key} is missing")
        return None
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _Shape(f"{where}{key} is {type(value).__name__}, not {expected}")
    return value


def _strings(obj: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    items = _get(obj, key, list, where) or []
    if not all(isinstance(s, str) for s in items):
        raise _Shape(f"{where}{key} holds a value that is not a string")
    return tuple(items)


def parse_advisory(doc: Any, name: str) -> tuple[Advisory, bool]:
    """One OSV document -> (its PyPI part, withdrawn?); `_Shape` when a field has the wrong type."""
    if not isinstance(doc, dict):
        raise _Shape(f"the document is a JSON {type(doc).__name__}, not an object")
    ident = _get(doc, "id", str, "", required=True)
    modified = _get(doc, "modified", str, "", required=True)
    withdrawn = _get(doc, "withdrawn", str, "") is not None
    affected: list[Affected] = []
    for i, item in enumerate(_get(doc, "affected", list, "") or []):
        where = f"affected[{i}]."
        if not isinstance(item, dict):
            raise _Shape(f"affected[{i}] is not an object")
        package = _get(item, "package", dict, where)
        if package is None:
            continue  # allowed by the schema (an affected entry for a product without a package): not PyPI
        ecosystem = _get(package, "ecosystem", str, where + "package.", required=True)
        pkg_name = _get(package, "name", str, where + "package.", required=True)
        ranges: list[Range] = []
        for j, rng in enumerate(_get(item, "ranges", list, where) or []):
            rwhere = f"{where}ranges[{j}]."
            if not isinstance(rng, dict):
                raise _Shape(f"{rwhere[:-1]} is not an object")
            rtype = _get(rng, "type", str, rwhere, required=True)
            events: list[Event] = []
            for k, evt in enumerate(_get(rng, "events", list, rwhere, required=True)):
                if not isinstance(evt, dict):
                    raise _Shape(f"{rwhere}events[{k}] is not an object")
                kinds = [kd for kd in EVENT_KINDS if kd in evt]
                if len(kinds) != 1:
                    raise _Shape(f"{rwhere}events[{k}] has {len(kinds)} of introduced/fixed/last_affected/limit, "
                                 "not one")
                events.append(Event(kinds[0], _get(evt, kinds[0], str, f"{rwhere}events[{k}].", required=True)))
            ranges.append(Range(rtype, tuple(events)))
        versions = _strings(item, "versions", where)
        if ecosystem == ECOSYSTEM:
            affected.append(Affected(canonicalize_name(pkg_name), tuple(ranges), versions))
    summary = _get(doc, "summary", str, "") or ""
    return Advisory(ident, modified, _strings(doc, "aliases", ""), summary, severity_of(doc),
                    tuple(affected), name), withdrawn


def _packages_named(doc: Any) -> tuple[str, ...]:
    """The PyPI packages a damaged document still names (best effort, never raises)."""
    found: set[str] = set()
    items = doc.get("affected") if isinstance(doc, dict) else None
    for item in items if isinstance(items, list) else []:
        pkg = item.get("package") if isinstance(item, dict) else None
        if isinstance(pkg, dict) and pkg.get("ecosystem") == ECOSYSTEM and isinstance(pkg.get("name"), str):
            found.add(canonicalize_name(pkg["name"]))
    return tuple(sorted(found))


# ---- severity --------------------------------------------------------------------------------------------------

_WORDS = {"low": "low", "moderate": "medium", "medium": "medium", "high": "high", "critical": "critical"}


def severity_of(doc: dict[str, Any]) -> str:
    """database_specific.severity (GHSA's LOW/MODERATE/HIGH/CRITICAL), else the CVSS v3 base score of severity[],
    else "unknown"."""
    specific = doc.get("database_specific")
    word = specific.get("severity") if isinstance(specific, dict) else None
    if isinstance(word, str) and word.strip().lower() in _WORDS:
        return _WORDS[word.strip().lower()]
    scores = doc.get("severity")
    for item in scores if isinstance(scores, list) else []:
        if isinstance(item, dict) and item.get("type") == "CVSS_V3" and isinstance(item.get("score"), str):
            rating = cvss3_rating(item["score"])
            if rating:
                return rating
    return "unknown"


# ---- evaluation ------------------------------------------------------------------------------------------------


class Undetermined(Exception):
    """A range whose versions PEP 440 cannot order: the installed version's status is unknown, not unaffected."""


@dataclass(frozen=True)
class Verdict:
    affected: bool
    fixed: tuple[str, ...] = ()  # the fixed versions above the installed one (lowest first)
    last_affected: str = ""


def _v(value: str) -> Version:
    try:
        return Version(value)
    except InvalidVersion:
        raise Undetermined(f"range version {value!r} is not a PEP 440 version") from None


def _sorted_events(events: tuple[Event, ...]) -> list[tuple[Version | None, Event]]:
    keyed = [(None if e.kind == "introduced" and e.value == "0" else _v(e.value), e)
             for e in events if e.kind != "limit"]
    return sorted(keyed, key=lambda pair: (pair[0] is not None, pair[0] or Version("0")))


def _in_range(v: Version, rng: Range) -> Verdict:
    limits = [e.value for e in rng.events if e.kind == "limit"]
    if limits and not any("*" in lim or v < _v(lim) for lim in limits):
        return Verdict(False)
    vulnerable = False
    fixes: list[str] = []
    last = ""
    for at, evt in _sorted_events(rng.events):
        if evt.kind == "introduced" and (at is None or v >= at):
            vulnerable, last = True, ""
        elif evt.kind == "fixed" and at is not None and v >= at:
            vulnerable = False
        elif evt.kind == "last_affected" and at is not None and v > at:
            vulnerable = False
        if evt.kind == "fixed" and at is not None and at > v:
            fixes.append(evt.value)
        if evt.kind == "last_affected" and at is not None and at >= v:
            last = last or evt.value
    return Verdict(vulnerable, tuple(fixes[:1]), last if vulnerable else "")


def evaluate(installed: Version, raw: str, affected: Affected) -> Verdict:
    """Whether `installed` (its text `raw`) is affected per OSV's IsVulnerable: listed in `versions` or inside an
    ECOSYSTEM (or SEMVER) range, under PEP 440 ordering; GIT ranges need the repository and are left to the
    `versions` list. `Undetermined` when no answer was found and a range could not be ordered."""
    fixes: list[str] = []
    undetermined: Undetermined | None = None
    for rng in affected.ranges:
        if rng.type not in ("ECOSYSTEM", "SEMVER"):
            continue
        try:
            verdict = _in_range(installed, rng)
        except Undetermined as exc:
            undetermined = undetermined or exc
            continue
        if verdict.affected:
            return verdict
        fixes.extend(verdict.fixed)
    for listed in affected.versions:
        if listed == raw or _same(listed, installed):
            return Verdict(True, tuple(sorted(set(fixes), key=_order)[:1]))
    if undetermined is not None:
        raise undetermined
    return Verdict(False)


def _same(listed: str, installed: Version) -> bool:
    try:
        return Version(listed) == installed
    except InvalidVersion:
        return False


def _order(value: str) -> Version:
    try:
        return Version(value)
    except InvalidVersion:
        return Version("0")
