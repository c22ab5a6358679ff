"""Python distributions against advisories (issue 42, item 2): an OSV database the user points to (`--osv PATH` or
IMAGEBUILD_OSV_DB: a folder of OSV JSON documents or the OSV PyPI export zip) and, where asked, PyPI's own
advisories, which PyPI's project JSON carries for the newest release only.

Nothing is called clean that was not checked: with no source consulted the result says "not checked"; a package
whose version PEP 440 cannot parse, whose advisory document is damaged, or that PyPI could not answer for is listed
as not looked up, with the reason. The entry point for `imagebuild audit` is `audit_python`; open the OSV source once
per run with `open_osv` (and one `PyPIAdvisories` per run) and pass them for every image.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from imagebuild.audit import model
from imagebuild.audit.model import NotLookedUp
from imagebuild.audit.osv import (
    Advisory,
    Damaged,
    OsvDatabase,
    OsvSourceError,
    Undetermined,
    evaluate,
    load_osv,
)

ENV_OSV = "IMAGEBUILD_OSV_DB"
PYPI_JSON = "https://pypi.org/pypi"
MAX_PYPI_ANSWER = 64 * 1024 * 1024
SEVERITIES = ("unknown", "low", "medium", "high", "critical")  # ascending; unknown sorts lowest but is never "low"

Fetch = Callable[[str], bytes]  # GET a URL -> its body; PyPINotFound for a 404, OSError for no answer


class PyPINotFound(Exception):
    pass


@dataclass(frozen=True)
class PythonFinding:
    package: str  # as installed (METADATA Name)
    installed: str
    id: str  # the advisory (PYSEC-…, GHSA-…)
    aliases: tuple[str, ...] = ()  # CVE IDs and the other databases' IDs of the same advisory
    fixed: tuple[str, ...] = ()  # the version(s) that fix it, lowest first; empty: no fix known
    last_affected: str = ""  # where the advisory names only the last affected version
    severity: str = "unknown"  # low | medium | high | critical | unknown
    summary: str = ""
    sources: tuple[str, ...] = ("osv",)  # osv | pypi
    modified: str = ""  # the advisory's own date (OSV `modified`; for PyPI the time PyPI was asked)

    @property
    def cves(self) -> tuple[str, ...]:
        return tuple(a for a in (self.id, *self.aliases) if a.startswith("CVE-"))


@dataclass(frozen=True)
class SourceStatus:
    source: str  # osv | pypi
    state: str  # checked | partial (damaged entries) | not checked | error
    detail: str  # what was read (path, counts, newest date) or why it was not consulted
    date: str = ""  # the newest advisory date read (OSV) or when it was asked (PyPI)
    damaged: tuple[Damaged, ...] = ()

    @property
    def consulted(self) -> bool:
        return self.state in ("checked", "partial")


@dataclass(frozen=True)
class PythonAudit:
    packages: int  # distinct distributions audited
    findings: tuple[PythonFinding, ...]
    not_looked_up: tuple[NotLookedUp, ...]
    sources: tuple[SourceStatus, ...]

    @property
    def checked(self) -> bool:
        return any(s.consulted for s in self.sources)

    @property
    def unlooked(self) -> tuple[tuple[str, str], ...]:
        """(package, version) no consulted source could look up completely."""
        consulted = {s.source for s in self.sources if s.consulted}
        missed: dict[tuple[str, str], set[str]] = {}
        for n in self.not_looked_up:
            missed.setdefault((n.package, n.version), set()).add(n.source)
        return tuple(sorted(k for k, srcs in missed.items() if consulted <= srcs))

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data (`checked` False: nothing was looked up, not "no vulnerabilities")."""
        return {"checked": self.checked, "summary": self.summary(), "packages": self.packages,
                "findings": [{**asdict(f), "cves": list(f.cves)} for f in self.findings],
                "not_looked_up": [asdict(n) for n in self.not_looked_up],
                "unlooked": [{"package": p, "version": v} for p, v in self.unlooked],
                "sources": [asdict(s) for s in self.sources]}

    def model_sources(self) -> tuple[model.SourceStatus, ...]:
        """Each source as the audit's SourceStatus named `python <source>`: checked (damaged entries named in the
        detail) or not checked (not given, unreadable, not answering: the detail says which)."""
        return tuple(model.SourceStatus(f"python {s.source}", model.CHECKED if s.consulted else model.NOT_CHECKED,
                                        s.detail if s.state != "error" else f"error: {s.detail}", s.date)
                     for s in self.sources)

    def model_findings(self) -> tuple[model.Finding, ...]:
        """Each finding as the audit's Finding (kind python, source `python osv+pypi`): the lowest fixed version,
        the advisory's id and aliases as ids; the note: the other fixed versions, else the last affected version,
        else "no fix known"."""
        out = []
        for f in self.findings:
            if len(f.fixed) > 1:
                note = "also fixed in " + ", ".join(f.fixed[1:])
            elif f.fixed:
                note = ""
            else:
                note = f"last affected {f.last_affected}" if f.last_affected else "no fix known"
            out.append(model.Finding("python " + "+".join(f.sources), f.package, f.installed,
                                     f.fixed[0] if f.fixed else "", (f.id, *f.aliases), f.severity, "python", "",
                                     f.modified, note))
        return tuple(out)

    def model_not_looked_up(self) -> tuple[NotLookedUp, ...]:
        return tuple(replace(n, source=f"python {n.source}") for n in self.not_looked_up)

    def into(self, result: model.AuditResult) -> model.AuditResult:
        """`result` (one image's audit) with this Python half added: its sources, findings and not-looked-up."""
        return replace(result, sources=result.sources + self.model_sources(),
                       findings=result.findings + self.model_findings(),
                       not_looked_up=result.not_looked_up + self.model_not_looked_up())

    def summary(self) -> str:
        if not self.checked:
            why = "; ".join(f"{s.source}: {s.detail}" for s in self.sources) or "no source given"
            text = f"Python packages: not checked ({why})"
            if self.unlooked:
                text += "; could not be looked up: " + ", ".join(f"{p} {v}" for p, v in self.unlooked)
            return text
        names = ", ".join(f"{s.source} ({s.detail})" for s in self.sources if s.consulted)
        vulnerable = len({f.package for f in self.findings})
        looked = self.packages - len(self.unlooked)
        count = len(self.findings)
        text = (f"Python packages: {count} known vulnerabilit{'y' if count == 1 else 'ies'} in {vulnerable} of "
                f"{looked} packages looked up, against {names}")
        if self.unlooked:
            text += (f"; {len(self.unlooked)} of {self.packages} could not be looked up: "
                     + ", ".join(f"{p} {v}" for p, v in self.unlooked))
        return text


@dataclass
class OsvSource:
    """The OSV database of a run, read once: `db` None when not given or unreadable (status says which)."""

    status: SourceStatus
    db: OsvDatabase | None = None


def open_osv(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> OsvSource:
    """The OSV database from `path` (--osv), else $IMAGEBUILD_OSV_DB; never raises: an unreadable source is a status
    'error' whose detail is the one line to print."""
    env = os.environ if environ is None else environ
    chosen = str(path) if path else env.get(ENV_OSV, "")
    if not chosen:
        return OsvSource(SourceStatus("osv", "not checked", f"no OSV database given (--osv PATH or {ENV_OSV})"))
    try:
        db = load_osv(chosen)
    except OsvSourceError as exc:
        return OsvSource(SourceStatus("osv", "error", str(exc)))
    date = db.newest_modified[:10]
    detail = (f"OSV {db.kind} {db.source}: {len(_unique(db))} PyPI advisories"
              f"{f', newest modified {date}' if date else ''}")
    if db.damaged:
        detail += f", {len(db.damaged)} damaged entr{'y' if len(db.damaged) == 1 else 'ies'}: " + ", ".join(
            f"{d.name} ({d.why})" for d in db.damaged[:5]) + (" …" if len(db.damaged) > 5 else "")
    state = "partial" if db.damaged else "checked"
    return OsvSource(SourceStatus("osv", state, detail, db.newest_modified, tuple(db.damaged)), db)


def _unique(db: OsvDatabase) -> set[str]:
    return {a.id for advisories in db.by_package.values() for a in advisories}


def _osv_lookup(db: OsvDatabase, name: str, raw: str, version: Version | None
                ) -> tuple[list[PythonFinding], list[NotLookedUp]]:
    findings: list[PythonFinding] = []
    missed = [NotLookedUp(name, raw, "osv", f"advisory document {d.name} is damaged ({d.why})")
              for d in db.damaged_for(name)]
    advisories = db.advisories(name)
    key = canonicalize_name(name)
    if version is None:  # only an explicit `versions` entry spelled the same can still answer
        for adv in sorted(advisories, key=_rank):
            if any(aff.package == key and raw in aff.versions for aff in adv.affected):
                findings.append(PythonFinding(name, raw, adv.id, adv.aliases, (), "", adv.severity, adv.summary,
                                              ("osv",), adv.modified))
        count = f": {len(advisories)} advisories for {name} could not be evaluated" if advisories else ""
        missed.append(NotLookedUp(name, raw, "osv", f"version {raw!r} is not a PEP 440 version{count}"))
        return findings, missed
    for adv in sorted(advisories, key=_rank):  # PyPI's own PYSEC id names a merged finding, then GitHub's
        for aff in adv.affected:
            if aff.package != key:
                continue
            try:
                verdict = evaluate(version, raw, aff)
            except Undetermined as exc:
                missed.append(NotLookedUp(name, raw, "osv", f"{adv.id} ({adv.document}): {exc}"))
                continue
            if verdict.affected:
                findings.append(PythonFinding(name, raw, adv.id, adv.aliases, verdict.fixed, verdict.last_affected,
                                              adv.severity, adv.summary, ("osv",), adv.modified))
                break
    return findings, missed


def _rank(adv: Advisory) -> tuple[int, str]:
    return (0 if adv.id.startswith("PYSEC-") else 1 if adv.id.startswith("GHSA-") else 2, adv.id)


# ---- PyPI ------------------------------------------------------------------------------------------------------


def ca_bundle(environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    return next((env[k] for k in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
                 if env.get(k) and Path(env[k]).is_file()), None)


def urllib_fetch(timeout: float = 20.0, environ: Mapping[str, str] | None = None) -> Fetch:
    """A Fetch over urllib, trusting $PIP_CERT (else REQUESTS_CA_BUNDLE, SSL_CERT_FILE, the system store)."""
    context = ssl.create_default_context(cafile=ca_bundle(environ))

    def fetch(url: str) -> bytes:
        req = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": "imagebuild-audit"})
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:  # noqa: S310 (PyPI)
                body: bytes = resp.read(MAX_PYPI_ANSWER + 1)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise PyPINotFound(url) from None
            raise OSError(f"HTTP {exc.code}") from None
        except (urllib.error.URLError, TimeoutError, ssl.SSLError) as exc:
            raise OSError(str(getattr(exc, "reason", exc))) from None
        if len(body) > MAX_PYPI_ANSWER:
            raise OSError(f"answer larger than {MAX_PYPI_ANSWER} bytes")
        return body

    return fetch


@dataclass
class PyPIAdvisories:
    """PyPI's advisories per project, each project asked once per run; after PyPI fails to answer once it is not
    asked again (the run's status says why)."""

    fetch: Fetch
    index: str = PYPI_JSON
    asked_at: str = ""
    failure: str = ""
    answers: dict[str, Any] = field(default_factory=dict)

    def status(self) -> SourceStatus:
        if not self.asked_at:
            return SourceStatus("pypi", "not checked", "PyPI was not asked")
        if self.failure and not any(not isinstance(a, Exception) for a in self.answers.values()):
            return SourceStatus("pypi", "error", f"{self.index} did not answer: {self.failure}", self.asked_at)
        return SourceStatus("pypi", "checked", f"{self.index} project JSON (newest releases only), asked "
                            f"{self.asked_at}", self.asked_at)

    def _project(self, key: str) -> Any:
        if key not in self.answers:
            if not self.asked_at:
                self.asked_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            try:
                body = self.fetch(f"{self.index}/{urllib.parse.quote(key)}/json")
                self.answers[key] = json.loads(body.decode("utf-8"))
            except PyPINotFound:
                self.answers[key] = PyPINotFound(f"{key} is not on {self.index}")
            except OSError as exc:
                self.failure = str(exc) or type(exc).__name__
                self.answers[key] = exc
            except (ValueError, UnicodeDecodeError, RecursionError):
                self.answers[key] = ValueError(f"the answer for {key} is not JSON")
        return self.answers[key]

    def lookup(self, name: str, raw: str, version: Version | None) -> tuple[list[PythonFinding], list[NotLookedUp]]:
        key = canonicalize_name(name)
        if version is None:
            return [], [NotLookedUp(name, raw, "pypi", f"version {raw!r} is not a PEP 440 version")]
        if self.failure and key not in self.answers:
            return [], [NotLookedUp(name, raw, "pypi", f"not checked via PyPI: {self.index} did not answer "
                                    f"({self.failure})")]
        doc = self._project(key)
        if isinstance(doc, Exception):
            return [], [NotLookedUp(name, raw, "pypi", f"not checked via PyPI: {doc}")]
        info = doc.get("info") if isinstance(doc, dict) else None
        newest = info.get("version") if isinstance(info, dict) else None
        vulns = doc.get("vulnerabilities") if isinstance(doc, dict) else None
        if not isinstance(newest, str) or not isinstance(vulns, list):
            return [], [NotLookedUp(name, raw, "pypi", "not checked via PyPI: the answer is not PyPI's project JSON "
                                    "(info.version or vulnerabilities missing)")]
        try:
            is_newest = Version(newest) == version
        except InvalidVersion:
            is_newest = newest == raw
        if not is_newest:
            return [], [NotLookedUp(name, raw, "pypi", f"not checked via PyPI: installed {raw} is not the newest "
                                    f"release {newest}")]
        findings = []
        for v in vulns:
            if not isinstance(v, dict) or not isinstance(v.get("id"), str):
                return [], [NotLookedUp(name, raw, "pypi", "not checked via PyPI: a vulnerability entry without id")]
            if v.get("withdrawn"):
                continue
            aliases = tuple(a for a in v.get("aliases") or () if isinstance(a, str))
            fixed = tuple(sorted((f for f in v.get("fixed_in") or () if isinstance(f, str)), key=_order))
            summary = v.get("summary") if isinstance(v.get("summary"), str) else ""
            findings.append(PythonFinding(name, raw, v["id"], aliases, fixed, "", "unknown", summary or "",
                                          ("pypi",), self.asked_at))
        return findings, []


def _order(value: str) -> Version:
    try:
        return Version(value)
    except InvalidVersion:
        return Version("0")


# ---- the audit -------------------------------------------------------------------------------------------------


def _merge(into: list[PythonFinding], new: PythonFinding) -> None:
    """One finding per advisory and package: PYSEC and GHSA entries alias each other, PyPI repeats OSV."""
    names = {new.id, *new.aliases}
    for i, old in enumerate(into):
        if old.package == new.package and names & {old.id, *old.aliases}:
            aliases = tuple(sorted(({*old.aliases, *new.aliases, new.id}) - {old.id}))
            fixed = tuple(sorted({*old.fixed, *new.fixed}, key=_order))
            severity = max(old.severity, new.severity, key=SEVERITIES.index)
            sources = tuple(dict.fromkeys((*old.sources, *new.sources)))
            into[i] = replace(old, aliases=aliases, fixed=fixed, severity=severity, sources=sources,
                              last_affected=old.last_affected or new.last_affected,
                              summary=old.summary or new.summary, modified=max(old.modified, new.modified))
            return
    into.append(new)


def audit_python(dists: Iterable[tuple[str, str]], osv: OsvSource | None = None,
                 pypi: PyPIAdvisories | None = None) -> PythonAudit:
    """The installed distributions (name, version) of one image against the run's OSV source and, when given,
    PyPI's advisories. With neither consulted the result is "not checked" (PythonAudit.checked is False)."""
    seen: dict[tuple[str, str], str] = {}
    for name, text in dists:
        seen.setdefault((canonicalize_name(name), text), name)
    findings: list[PythonFinding] = []
    missed: list[NotLookedUp] = []
    sources = [osv.status if osv else SourceStatus("osv", "not checked",
                                                   f"no OSV database given (--osv PATH or {ENV_OSV})")]
    for (_, raw), name in sorted(seen.items()):
        try:
            parsed: Version | None = Version(raw)
        except InvalidVersion:
            parsed = None
        found: list[PythonFinding] = []
        if osv is not None and osv.db is not None:
            hits, miss = _osv_lookup(osv.db, name, raw, parsed)
            found += hits
            missed += miss
        if pypi is not None:
            hits, miss = pypi.lookup(name, raw, parsed)
            found += hits
            missed += miss
        if parsed is None and not (osv and osv.db) and pypi is None:
            missed.append(NotLookedUp(name, raw, "osv", f"version {raw!r} is not a PEP 440 version"))
        merged: list[PythonFinding] = []
        for f in found:
            _merge(merged, f)
        findings += merged
    if pypi is not None:
        sources.append(pypi.status())
    return PythonAudit(len(seen), tuple(findings), tuple(missed), tuple(sources))
