"""The audit's typed results, shared by its halves (OS packages: os.py; Python distributions: python.py) and read by
the command and the policy: a finding names its source and that source's date; a source not consulted is "not
checked" with the reason, never clean."""

from __future__ import annotations

from dataclasses import dataclass

CHECKED = "checked"
NOT_CHECKED = "not checked"


@dataclass(frozen=True)
class Finding:
    source: str  # e.g. "debian-security bookworm-security" or "osv"
    package: str  # the installed package (binary package for dpkg, distribution name for Python)
    installed: str
    fixed: str  # the version that fixes it ("" when none is known)
    ids: tuple[str, ...] = ()  # CVE / DSA / DLA / USN / OSV IDs of the fix, where they could be read
    severity: str = "unknown"  # low | medium | high | critical | unknown
    kind: str = "os"  # os | python
    source_package: str = ""  # the source package a dpkg binary was built from (what a security fix is made for)
    date: str = ""  # the source's date (the signed index's Date:, the advisory's modified)
    note: str = ""  # e.g. "ids not read: changelog unreachable"


@dataclass(frozen=True)
class SourceStatus:
    source: str
    state: str  # CHECKED | NOT_CHECKED
    detail: str  # what was read (URL, counts, index date) or why it was not consulted
    date: str = ""  # the index's / database's date


@dataclass(frozen=True)
class NotLookedUp:
    package: str
    version: str
    source: str
    reason: str


@dataclass(frozen=True)
class AuditResult:
    """One image's audit: every source's status, the findings, and the packages a source could not look up."""

    image: str  # what the user named (tag, plan id)
    image_id: str
    sources: tuple[SourceStatus, ...] = ()
    findings: tuple[Finding, ...] = ()
    not_looked_up: tuple[NotLookedUp, ...] = ()

    def checked(self, kind: str | None = None) -> bool:
        return any(s.state == CHECKED for s in self.sources if kind is None or s.source.startswith(kind))
