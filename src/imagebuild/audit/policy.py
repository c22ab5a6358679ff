"""An image's audit against the matrix's `audit:` policy (matrix/audit.py): which findings violate it, which an
allowance covers, and the exit code of `imagebuild audit`.

Exit codes: 0 every source consulted and nothing violates the policy (or an allowance covers it); 1 a violation;
2 bad input (usage, a matrix problem: an allowance without a reason or past its date); 3 nothing violates, but a
source could not be checked for some image (so it is not called clean)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from imagebuild.audit.model import CHECKED, AuditResult, Finding
from imagebuild.matrix.audit import SEVERITIES, Allowance, AuditPolicy

EXIT_CLEAN, EXIT_VIOLATION, EXIT_NOT_CHECKED = 0, 1, 3
DEFAULT = AuditPolicy()  # no `audit:` in the matrix (or an image given by reference): fail on a security fix


@dataclass(frozen=True)
class Judged:
    finding: Finding
    violates: bool
    allowed_by: Allowance | None = None


def _rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else -1


def judge(finding: Finding, policy: AuditPolicy) -> Judged:
    if finding.kind == "os":
        counts = policy.fail_on == "security-fix"
    else:  # python: at or above the severity; an unknown severity counts (nothing is called harmless unread)
        counts = _rank(finding.severity) < 0 or _rank(finding.severity) >= _rank(policy.python_severity)
    if not counts:
        return Judged(finding, False)
    for allowance in policy.allow:
        if allowance.covers(finding.package, finding.ids):
            return Judged(finding, False, allowance)
    return Judged(finding, True)


def judge_all(result: AuditResult, policy: AuditPolicy) -> list[Judged]:
    return [judge(f, policy) for f in result.findings]


def exit_code(results: Iterable[tuple[AuditResult, list[Judged]]]) -> int:
    code = EXIT_CLEAN
    for result, judged in results:
        if any(j.violates for j in judged):
            return EXIT_VIOLATION
        if not result.sources or any(s.state != CHECKED for s in result.sources):
            code = EXIT_NOT_CHECKED
    return code
