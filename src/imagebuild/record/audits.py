"""Audit results kept in the record (`audits`: image ID -> the last `imagebuild audit -m` of that image), so the build
report, the catalog and a signed push show the audit of exactly the image they describe.

An entry is bound to the image ID it audited (the key and its `image_id` agree, or it is ignored): a result for
another image ID is never shown as this image's. Counts say "not checked" (None) for a half whose every source could
not be consulted, never 0.

    entry = audit_entry(result, judged, at)          # after one image's audit
    rec.audits[entry["image_id"]] = entry
    audit_summary(rec.audits, image_id)              # the report row's / catalog's counts, or None
    describe(summary, image_id)                      # its one cell ("not checked" unless of exactly image_id)
"""

from __future__ import annotations

from typing import Any

from imagebuild import values
from imagebuild.models import describe_audit as describe  # one wording for the report and the catalog

# the audit's JSON fields (audit/report.to_json) kept per finding: the CycloneDX writer and the counts read these
__all__ = ["FINDING_KEYS", "audit_entry", "audit_summary", "audits_problem", "counts", "describe"]

FINDING_KEYS = ("source", "kind", "package", "installed", "fixed", "ids", "severity", "source_package", "date",
                "note", "violates")


def _half(source: str) -> str:
    """Which half a source status belongs to: "python" (python osv / python pypi), "image" (no image), else "os"."""
    if source.startswith("python"):
        return "python"
    return "image" if source == "image" else "os"


def audit_entry(doc: dict[str, Any], at: str, tool: str) -> dict[str, Any]:
    """The record's entry for one audited image from `audit/report.to_json`'s document (an image found: image_id
    set), `at` the time the audit ran (RFC 3339), `tool` the imagebuild version."""
    return {
        "image_id": doc["image_id"], "image": doc.get("image") or "", "at": at, "tool": tool,
        "sources": [{k: s.get(k, "") for k in ("source", "state", "detail", "date")} for s in doc.get("sources") or []],
        "findings": [{k: f.get(k) for k in FINDING_KEYS} for f in doc.get("findings") or []],
        "not_looked_up": [dict(m) for m in doc.get("not_looked_up") or []],
    }


def counts(entry: dict[str, Any]) -> dict[str, Any]:
    """{"security_fixes": n | None, "python": n | None, "violations": n, "not_checked": [source: why, ...]}: None
    where no source of that half was consulted (not checked, never 0)."""
    sources = entry.get("sources") or []
    findings = entry.get("findings") or []
    checked = {h: any(_half(str(s.get("source"))) == h and s.get("state") == "checked" for s in sources)
               for h in ("os", "python")}
    out: dict[str, Any] = {
        "security_fixes": sum(1 for f in findings if f.get("kind") == "os") if checked["os"] else None,
        "python": sum(1 for f in findings if f.get("kind") == "python") if checked["python"] else None,
        "violations": sum(1 for f in findings if f.get("violates")),
        "not_checked": [f"{s.get('source')}: {s.get('detail')}" for s in sources if s.get("state") != "checked"],
    }
    return out


def audit_summary(audits: dict[str, Any] | None, image_id: str | None) -> dict[str, Any] | None:
    """What a report row / catalog row says of the audit of `image_id`: {"image_id", "at", counts...}, or None when
    the record holds no audit of exactly that image ID."""
    entry = (audits or {}).get(image_id or "")
    if not image_id or not isinstance(entry, dict) or entry.get("image_id") != image_id:
        return None
    return {"image_id": image_id, "at": entry.get("at"), **counts(entry)}


def _problem_in(image_id: str, entry: object) -> str | None:
    at = f"audits.{image_id}"
    if not isinstance(entry, dict):
        return f"{at} must be an object"
    if entry.get("image_id") != image_id:
        return f"{at}.image_id must be {image_id!r} (the key it is kept under)"
    try:
        values.image_id(image_id)
        values.rfc3339(entry.get("at"))  # type: ignore[arg-type]  # a non-string is ValueProblem too
    except values.ValueProblem as problem:
        return f"{at}: {problem}"
    for key in ("sources", "findings", "not_looked_up"):
        items = entry.get(key, [])
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            return f"{at}.{key} must be a list of objects"
    for n, f in enumerate(entry.get("findings") or []):
        for key in ("source", "kind", "package", "installed", "fixed", "severity"):
            if not isinstance(f.get(key), str):
                return f"{at}.findings[{n}].{key} must be a string"
        if not isinstance(f.get("ids") or [], list):
            return f"{at}.findings[{n}].ids must be a list"
    for n, s in enumerate(entry.get("sources") or []):
        if not isinstance(s.get("source"), str) or s.get("state") not in ("checked", "not checked", "error"):
            return f"{at}.sources[{n}] must name a source and a state (checked, not checked, error)"
    return None


def audits_problem(audits: object) -> str | None:
    """Why a record's `audits` is not what this version writes, or None (record/store.shape_problem asks)."""
    if audits is None:
        return None
    if not isinstance(audits, dict):
        return "'audits' must be an object"
    return next((p for k, e in audits.items() if (p := _problem_in(str(k), e))), None)
