"""The audit of a pushed image as a signed attestation beside its SBOM, and how `verify --max-audit-age` asks for it.

Predicate type: cosign's vulnerability scan record, `cosign attest --type vuln`
(https://cosign.sigstore.dev/attestation/vuln/v1). Why this one: it is the standard predicate for "a scanner looked
at this digest at this time" (cosign's own spec; Trivy writes it as `--format cosign-vuln`; Kyverno and cosign's
CUE/Rego policies check its `metadata.scanFinishedOn` for freshness), so the audit's time is a field every verifier
reads the same way; and it is its own predicate type, so it never mixes with the SBOM's `cyclonedx` attestation
(`https://cyclonedx.org/bom`, one per key and digest) and a newer audit of the same bytes is added beside the older
one. Its `scanner.result` is the CycloneDX 1.6 `vulnerabilities` document (audit/cyclonedx.py): the full list, with
every source that could not be consulted named in its metadata properties.

    predicate = vuln_predicate(entry, vulnerabilities_bom(entry))  # the record's audit of the pushed image ID
    newest_audit(statements, digest, max_age, now)            # VerifyError text or the statement
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from imagebuild.errors import UsageError
from imagebuild.secrets import mask_tree

VULN = "vuln"  # cosign --type
VULN_PREDICATE_TYPE = "https://cosign.sigstore.dev/attestation/vuln/v1"
_AGE = re.compile(r"^\s*(\d+)\s*(s|m|h|d|w)\s*$")
CLOCK_SKEW = 300  # seconds an audit's time may lie ahead of this host's clock
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def vuln_predicate(entry: dict[str, Any], bom: dict[str, Any]) -> dict[str, Any]:
    """cosign's vuln predicate of one audit (the record's entry of exactly the image ID being pushed; `bom` its
    audit/cyclonedx.py document), its values masked (secrets.mask_tree: a credentialed index URL in a source's
    detail never reaches the signed statement)."""
    sources = entry.get("sources") or []
    dates = sorted(str(s.get("date")) for s in sources if s.get("date"))
    doc: dict[str, Any] = mask_tree({
        "invocation": {"parameters": None, "uri": "", "event_id": "", "builder.id": ""},
        "scanner": {"uri": f"pkg:generic/imagebuild@{entry.get('tool') or 'unknown'}",
                    "version": str(entry.get("tool") or "unknown"),
                    "db": {"uri": "; ".join(f"{s.get('source')} ({s.get('state')})" for s in sources),
                           "version": dates[-1] if dates else ""},
                    "result": bom},
        "metadata": {"scanStartedOn": entry["at"], "scanFinishedOn": entry["at"]},
    })
    return doc


def parse_age(text: str, option: str = "--max-audit-age") -> int:
    """Seconds of `7d`, `12h`, `30m`, `2w`, `90s`; UsageError naming the option and the units otherwise."""
    m = _AGE.match(text or "")
    if not m or int(m.group(1)) <= 0:
        raise UsageError(f"{option} {text!r}: give a positive number with a unit: s, m, h, d or w (e.g. 7d)")
    return int(m.group(1)) * _UNITS[m.group(2)]


def describe_age(seconds: float) -> str:
    """`9d 2h`, `5h 3m`, `42m`, `17s`."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m" if minutes else f"{secs}s"


def audit_time(statement: dict[str, Any]) -> datetime | None:
    """The audit's time (`predicate.metadata.scanFinishedOn`, RFC 3339), None when absent or unreadable."""
    text = str(((statement.get("predicate") or {}).get("metadata") or {}).get("scanFinishedOn") or "")
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def is_audit(statement: dict[str, Any]) -> bool:
    """An imagebuild audit: its result is a CycloneDX document with a `vulnerabilities` list."""
    result = ((statement.get("predicate") or {}).get("scanner") or {}).get("result")
    return isinstance(result, dict) and result.get("bomFormat") == "CycloneDX" and \
        isinstance(result.get("vulnerabilities"), list)


def newest_audit(statements: list[dict[str, Any]], shown: str, digest: str, max_age: int, limit: str,
                 now: datetime | None = None) -> dict[str, Any]:
    """The newest verified audit statement of `digest` no older than `max_age` seconds; ValueError with the one
    line to say otherwise (none found, none readable, the newest too old: its age and the limit)."""
    now = now or datetime.now(timezone.utc)
    dated = [(when, st) for st in statements if is_audit(st) and (when := audit_time(st)) is not None]
    if not dated:
        raise ValueError(f"{shown}: no audit attestation of {digest} was found (a {VULN} attestation whose result "
                         "is a CycloneDX vulnerabilities document, signed by this key); not checked, never clean "
                         "(run imagebuild audit -m MATRIX, then push with --sign-key)")
    when, statement = max(dated, key=lambda pair: pair[0])
    age = (now - when).total_seconds()
    if age < -CLOCK_SKEW:  # a signed claim from the future says nothing about freshness: refused, never fresh
        raise ValueError(f"{shown}: the newest audit attestation of {digest} is dated "
                         f"{when.strftime('%Y-%m-%dT%H:%M:%SZ')}, {describe_age(-age)} in the future of this "
                         f"host's clock; its age cannot be judged against --max-audit-age {limit}")
    if age > max_age:
        raise ValueError(f"{shown}: the newest audit attestation of {digest} is {describe_age(age)} old (audited "
                         f"{when.strftime('%Y-%m-%dT%H:%M:%SZ')}), older than --max-audit-age {limit}")
    return statement
