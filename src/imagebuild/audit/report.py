"""One image's audit as AuditResult (the OS half and the Python half merged) and how `imagebuild audit` prints it:
text or JSON. Every source says checked or "not checked" with why; nothing counts as clean that was not checked."""

from __future__ import annotations

from typing import Any

from imagebuild.audit.model import CHECKED, AuditResult, Finding, SourceStatus
from imagebuild.audit.os import OsAudit
from imagebuild.audit.policy import Judged
from imagebuild.audit.python import PythonAudit


def merge(image: str, image_id: str, os_audit: OsAudit | None, py: PythonAudit | None) -> AuditResult:
    result = AuditResult(image, image_id)
    if os_audit is not None:
        result = AuditResult(image, image_id, (os_audit.status,), os_audit.findings, os_audit.not_looked_up)
    return py.into(result) if py is not None else result


def _found(s: SourceStatus, f: Finding) -> bool:
    """Whether `f` came from source `s` ("python osv+pypi" came from "python osv" and from "python pypi")."""
    if f.source == s.source:
        return True
    kind, _, names = f.source.rpartition(" ")
    own_kind, _, own = s.source.rpartition(" ")
    return kind == own_kind and own in names.split("+")


def to_json(result: AuditResult, judged: list[Judged]) -> dict[str, Any]:
    return {
        "image": result.image, "image_id": result.image_id,
        "sources": [{"source": s.source, "state": s.state, "detail": s.detail, "date": s.date} for s in result.sources],
        "findings": [{"source": j.finding.source, "kind": j.finding.kind, "package": j.finding.package,
                      "installed": j.finding.installed, "fixed": j.finding.fixed, "ids": list(j.finding.ids),
                      "severity": j.finding.severity, "source_package": j.finding.source_package,
                      "date": j.finding.date, "note": j.finding.note, "violates": j.violates,
                      "allowed": ({"id": j.allowed_by.id, "package": j.allowed_by.package,
                                   "reason": j.allowed_by.reason, "expires": j.allowed_by.expires}
                                  if j.allowed_by else None)} for j in judged],
        "not_looked_up": [{"package": m.package, "version": m.version, "source": m.source, "reason": m.reason}
                          for m in result.not_looked_up],
    }


def format_text(result: AuditResult, judged: list[Judged]) -> str:
    lines = [f"{result.image} ({result.image_id[7:19] or '?'})"]
    for s in result.sources:
        if s.state == CHECKED:
            n = sum(1 for f in result.findings if _found(s, f))
            lines.append(f"  {s.source}: checked, {n} finding(s) ({s.detail})")
        else:
            lines.append(f"  {s.source}: NOT CHECKED: {s.detail}")
    for j in judged:
        f = j.finding
        ids = ", ".join(f.ids) if f.ids else "-"
        mark = "VIOLATION" if j.violates else (f"allowed ({j.allowed_by.reason}, until {j.allowed_by.expires})"
                                               if j.allowed_by else "below the policy")
        extra = f" [{f.note}]" if f.note else ""
        sev = f" {f.severity}" if f.kind == "python" else ""
        lines.append(f"    {f.package} {f.installed} -> {f.fixed or '?'}{sev}  {ids}  {mark}{extra}")
    for m in result.not_looked_up:
        lines.append(f"    not looked up: {m.package} {m.version} ({m.source}): {m.reason}")
    return "\n".join(lines) + "\n"
