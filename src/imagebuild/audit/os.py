"""An image's dpkg packages against its release's signed security index (debian.py): a package whose binary the
security suite offers at a higher Debian version, or (the binary renamed or dropped there) whose source package it
offers at a higher version, is a finding with the installed and the fixed version. CVE IDs come from the fixed
source's changelog (entries newer than the installed version) where the changelog server answers; where it does not,
the finding says the IDs were not read. An OS compat does not know, or an index that cannot be read or trusted,
leaves the source "not checked" with the reason: never clean."""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from imagebuild.audit.debian import IndexUnavailable, SecurityIndex, SecurityIndexes, suite_for
from imagebuild.audit.model import CHECKED, NOT_CHECKED, Finding, NotLookedUp, SourceStatus
from imagebuild.lock.apt import compare_versions
from imagebuild.values import ValueProblem, debian_version

_CVE = re.compile(r"\b(CVE-\d{4}-\d{4,}|DSA-\d+-\d+|DLA-\d+-\d+|USN-\d+-\d+)\b")
_ENTRY = re.compile(r"^(\S+) \(([^)]+)\) ")
ChangelogFetch = Callable[[str, float], bytes]


@dataclass(frozen=True)
class Installed:
    """One dpkg package as the inventory read it (inventory.model.DebPackage's fields the audit needs)."""

    name: str
    version: str
    architecture: str = ""
    source: str = ""
    source_version: str = ""


@dataclass(frozen=True)
class OsAudit:
    status: SourceStatus
    findings: tuple[Finding, ...] = ()
    not_looked_up: tuple[NotLookedUp, ...] = ()
    packages: int = 0


def changelog_url(family: str, source: str, version: str) -> str:
    """Where the archive publishes a source version's changelog (Debian's metadata server; Ubuntu's changelogs)."""
    prefix = source[:4] if source.startswith("lib") else source[:1]
    plain = version.split(":", 1)[-1]
    if family == "ubuntu":
        return f"https://changelogs.ubuntu.com/changelogs/pool/main/{prefix}/{source}/{source}_{plain}/changelog"
    return f"http://metadata.ftp-master.debian.org/changelogs/main/{prefix}/{source}/{source}_{plain}_changelog"


def ids_since(changelog: str, installed: str) -> tuple[str, ...]:
    """The CVE/DSA/DLA/USN IDs named by the changelog's entries newer than `installed` (newest entry first)."""
    ids: list[str] = []
    keep = False
    for line in changelog.splitlines():
        m = _ENTRY.match(line)
        if m:
            try:
                keep = compare_versions(m.group(2), installed) > 0
            except (ValueError, IndexError):
                keep = False
            continue
        if keep:
            ids.extend(i for i in _CVE.findall(line) if i not in ids)
    return tuple(sorted(ids))


@dataclass
class Changelogs:
    """The fixed sources' changelogs, asked once each per run; after one failure no more are asked (a server that
    is not reachable would cost a timeout per package)."""

    fetch: ChangelogFetch | None
    timeout: float = 10.0
    failure: str = ""
    _got: dict[str, str | None] = field(default_factory=dict)

    def ids(self, family: str, source: str, fixed: str, installed: str) -> tuple[tuple[str, ...], str]:
        if self.fetch is None:
            return (), "ids not read: changelogs not asked (--no-changelogs)"
        url = changelog_url(family, source, fixed)
        if url not in self._got:
            if self.failure:
                self._got[url] = None
            else:
                try:
                    raw = self.fetch(url, self.timeout)
                    self._got[url] = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8", "replace")
                except Exception as exc:  # any transport failure: say the IDs were not read, and why
                    self.failure = f"{url.split('/changelogs/')[0]} not reachable ({str(exc)[:120] or type(exc).__name__})"
                    self._got[url] = None
        text = self._got[url]
        if text is None:
            return (), f"ids not read: {self.failure or 'changelog unreadable'}"
        return ids_since(text, installed), ""


def compare(index: SecurityIndex, debs: Iterable[Installed], changelogs: Changelogs
            ) -> tuple[list[Finding], list[NotLookedUp]]:
    findings: list[Finding] = []
    missed: list[NotLookedUp] = []
    source = index.suite.name
    for deb in debs:
        try:
            debian_version(deb.version)
            if deb.source_version:
                debian_version(deb.source_version)
        except ValueProblem as exc:
            missed.append(NotLookedUp(deb.name, deb.version, source, str(exc)))
            continue
        src = deb.source or deb.name
        offered = index.binaries.get(deb.name)
        fixed, note = "", ""
        if offered is not None and compare_versions(deb.version, offered.version) < 0:
            fixed, src = offered.version, offered.source
            src_fixed, src_installed = offered.source_version, deb.source_version or deb.version
        elif offered is None and src in index.sources and \
                compare_versions(deb.source_version or deb.version, index.sources[src]) < 0:
            src_fixed, src_installed = index.sources[src], deb.source_version or deb.version
            fixed, note = src_fixed, f"the suite no longer builds {deb.name}: source {src} fixed in {src_fixed}"
        if not fixed:
            continue
        ids, why = changelogs.ids(index.suite.family, src, src_fixed, src_installed)
        findings.append(Finding(source=source, package=deb.name, installed=deb.version, fixed=fixed, ids=ids,
                                kind="os", source_package=src, date=index.date,
                                note="; ".join(n for n in (note, why) if n)))
    return findings, missed


def audit_os(os_id: str, codename: str, arch: str, debs: Iterable[Installed], indexes: SecurityIndexes,
             changelogs: Changelogs) -> OsAudit:
    """One image's dpkg packages (`os_id`/`codename` from its os-release, `arch` its Debian architecture)."""
    debs = list(debs)
    what = f"{os_id or 'unknown'}-security {codename + '-security' if codename else ''}".strip()
    if not debs:
        return OsAudit(SourceStatus(what, NOT_CHECKED, "no dpkg database in the image"))
    suite = suite_for(indexes.tables, os_id, codename, arch) if os_id and codename else None
    if suite is None:
        return OsAudit(SourceStatus(what, NOT_CHECKED, f"no security suite known for os-release "
                                    f"{os_id or '?'} {codename or '?'} (compat/data/os.yaml)"), packages=len(debs))
    try:
        index = indexes.get(suite)
    except IndexUnavailable as exc:
        return OsAudit(SourceStatus(suite.name, NOT_CHECKED, str(exc)), packages=len(debs))
    findings, missed = compare(index, debs, changelogs)
    detail = (f"{len(debs)} packages against {', '.join(index.files)} ({len(index.binaries)} packages, "
              f"InRelease sha256 {index.inrelease_sha256[:12]}, signed {index.date})")
    return OsAudit(SourceStatus(suite.name, CHECKED, detail, index.date), tuple(findings), tuple(missed), len(debs))
