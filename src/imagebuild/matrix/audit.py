"""The matrix's `audit:` policy (issue 42): what `imagebuild audit` fails on, and the allowances.

    audit:
      fail_on: security-fix        # security-fix (default): any OS package the security suite fixes; none
      python_severity: high        # a Python advisory at or above it fails (low | medium | high | critical)
      allow:
        - {id: CVE-2025-1234, reason: "not reachable: no TLS server in the image", expires: 2027-03-31}
        - {package: libssl3, reason: "rebuilt weekly", expires: 2027-01-15}

An allowance needs an `id` (CVE, DSA, OSV ID) or a `package`, a `reason` and an `expires` date (YYYY-MM-DD); one
without a reason or past its expiry date is itself an error, so an allowance is looked at again."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any, Protocol

from imagebuild.matrix.fields import describe, suggest

FAIL_ON = ("security-fix", "none")
SEVERITIES = ("low", "medium", "high", "critical")
POLICY_KEYS = ("fail_on", "python_severity", "allow")
ALLOW_KEYS = ("id", "package", "reason", "expires")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
EXAMPLE = "{fail_on: security-fix, python_severity: high, allow: [{id: CVE-2025-1234, reason: ..., expires: 2027-03-31}]}"


@dataclass(frozen=True)
class Allowance:
    id: str
    package: str
    reason: str
    expires: str  # YYYY-MM-DD
    line: int = 0  # where the matrix writes it

    def covers(self, package: str, ids: tuple[str, ...]) -> bool:
        if self.id and self.id not in ids:
            return False
        return not self.package or self.package == package


@dataclass(frozen=True)
class AuditPolicy:
    fail_on: str = "security-fix"
    python_severity: str = "high"
    allow: tuple[Allowance, ...] = ()
    file: str = ""  # the matrix file, for messages


class _Bad(Protocol):
    def bad(self, path: tuple[Any, ...], message: str, choices: str = "") -> None: ...
    def mapping(self, value: Any, path: tuple[Any, ...], example: str) -> dict[Any, Any]: ...


def today() -> dt.date:
    """The date allowances expire against (UTC; a function so tests can fix it)."""
    return dt.datetime.now(dt.timezone.utc).date()


def check_audit(c: _Bad, doc: dict[Any, Any], line: Any, file: str) -> AuditPolicy | None:
    """The checked `audit:` block (None when the matrix has none); problems through `c.bad`."""
    if doc.get("audit") is None:
        return None
    block = c.mapping(doc["audit"], ("audit",), EXAMPLE)
    for key in block:
        if key not in POLICY_KEYS:
            c.bad(("audit", key), f"unknown key {key!r} in audit", suggest(str(key), POLICY_KEYS))
    fail_on = block.get("fail_on", "security-fix")
    if fail_on not in FAIL_ON:
        c.bad(("audit", "fail_on"), f"expected {' or '.join(FAIL_ON)}, got {describe(fail_on)}",
              suggest(str(fail_on), FAIL_ON))
        fail_on = "security-fix"
    severity = block.get("python_severity", "high")
    if severity not in SEVERITIES:
        c.bad(("audit", "python_severity"), f"expected one of {', '.join(SEVERITIES)}, got {describe(severity)}",
              suggest(str(severity), SEVERITIES))
        severity = "high"
    allow = block.get("allow")
    if allow is not None and not isinstance(allow, list):
        c.bad(("audit", "allow"), f"expected a list of allowances, got {describe(allow)}",
              "for example [{id: CVE-2025-1234, reason: ..., expires: 2027-03-31}]")
        allow = []
    out = [a for i, item in enumerate(allow or []) if (a := _allowance(c, item, ("audit", "allow", i), line)) is not None]
    return AuditPolicy(str(fail_on), str(severity), tuple(out), file)


def _allowance(c: _Bad, item: Any, path: tuple[Any, ...], line: Any) -> Allowance | None:
    if not isinstance(item, dict):
        c.bad(path, f"expected an allowance mapping, got {describe(item)}",
              "for example {id: CVE-2025-1234, reason: ..., expires: 2027-03-31}")
        return None
    ok = True
    for key in item:
        if key not in ALLOW_KEYS:
            c.bad((*path, key), f"unknown key {key!r} in an allowance", suggest(str(key), ALLOW_KEYS))
            ok = False
    ident, package = item.get("id"), item.get("package")
    for key, value in (("id", ident), ("package", package)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            c.bad((*path, key), f"expected a non-empty {key}, got {describe(value)}")
            ok = False
    if not ident and not package:
        c.bad(path, "an allowance names neither an id nor a package", "id: CVE-…/DSA-…/GHSA-…, or package: NAME")
        ok = False
    reason = item.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        c.bad((*path, "reason") if "reason" in item else path,
              "an allowance without a reason" if "reason" not in item else f"expected a reason, got {describe(reason)}",
              "say why the finding is accepted, for whoever looks at it next")
        ok = False
    expires = item.get("expires")
    text = expires.isoformat() if isinstance(expires, dt.date) else expires
    if not isinstance(text, str) or not _DATE.fullmatch(text):
        c.bad((*path, "expires") if "expires" in item else path,
              "an allowance without an expiry date" if "expires" not in item else
              f"expected a date YYYY-MM-DD, got {describe(expires)}", "allowances expire so they are looked at again")
        return None
    try:
        when = dt.date.fromisoformat(text)
    except ValueError:
        c.bad((*path, "expires"), f"{text!r} is not a date")
        return None
    if when < today():
        c.bad((*path, "expires"), f"the allowance expired on {text}", "renew it (with a reason) or remove it")
        ok = False
    return Allowance(str(ident or ""), str(package or ""), str(reason), text, line(path)) if ok else None
