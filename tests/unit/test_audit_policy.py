"""Issue 42 item 3: the matrix's `audit:` policy (FILE:LINE problems, allowances that need a reason and expire) and
how `imagebuild audit` judges findings and exits."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import subprocess
import sys

import pytest

from imagebuild.audit.model import CHECKED, NOT_CHECKED, AuditResult, Finding, SourceStatus
from imagebuild.audit.policy import (
    DEFAULT,
    EXIT_CLEAN,
    EXIT_NOT_CHECKED,
    EXIT_VIOLATION,
    exit_code,
    judge_all,
)
from imagebuild.audit.report import format_text, to_json
from imagebuild.matrix import audit as policy_mod
from imagebuild.matrix import parse_matrix

BASE = 'name: t\nmatrix: {torch: ["2.9.1"], cuda: [cpu], python: ["3.11"], os: [debian12], flavors: [[base, runtime]]}\n'


@pytest.fixture(autouse=True)
def _today(monkeypatch):
    monkeypatch.setattr(policy_mod, "today", lambda: dt.date(2026, 12, 5))


def _problems(text: str) -> list[str]:
    return [str(p) for p in parse_matrix(BASE + text, "m.yaml").problems]


def test_policy_is_read_with_defaults():
    doc = parse_matrix(BASE + "audit:\n  allow:\n    - {id: CVE-2025-9230, reason: no TLS, expires: 2027-03-31}\n", "m.yaml")
    assert doc.problems == [] and doc.audit is not None
    assert (doc.audit.fail_on, doc.audit.python_severity) == ("security-fix", "high")
    assert doc.audit.allow[0].id == "CVE-2025-9230" and doc.audit.allow[0].expires == "2027-03-31"
    assert doc.audit.allow[0].line == 5
    assert parse_matrix(BASE, "m.yaml").audit is None


def test_every_policy_problem_is_one_file_line_error():
    got = _problems("audit:\n"
                    "  fail_on: securityfix\n"
                    "  python_severit: high\n"
                    "  allow:\n"
                    "    - {id: CVE-2025-1, expires: 2027-01-01}\n"
                    "    - {package: libssl3, reason: old, expires: 2026-12-04}\n"
                    "    - {package: libssl3, reason: x, expires: soon}\n"
                    "    - {package: libssl3, reason: x}\n"
                    "    - {reason: x, expires: 2027-01-01}\n"
                    "    - {package: libssl3, reason: '  ', expires: 2027-01-01, reasn: x}\n"
                    "    - {package: libssl3, reason: today is fine, expires: 2026-12-05}\n")
    assert got == [
        "m.yaml:5: audit.python_severit: unknown key 'python_severit' in audit; did you mean 'python_severity'?",
        "m.yaml:4: audit.fail_on: expected security-fix or none, got 'securityfix'; did you mean 'security-fix'?",
        "m.yaml:7: audit.allow[0]: an allowance without a reason; say why the finding is accepted, for whoever "
        "looks at it next",
        "m.yaml:8: audit.allow[1].expires: the allowance expired on 2026-12-04; renew it (with a reason) or remove it",
        "m.yaml:9: audit.allow[2].expires: expected a date YYYY-MM-DD, got 'soon'; allowances expire so they are "
        "looked at again",
        "m.yaml:10: audit.allow[3]: an allowance without an expiry date; allowances expire so they are looked at again",
        "m.yaml:11: audit.allow[4]: an allowance names neither an id nor a package; id: CVE-…/DSA-…/GHSA-…, or "
        "package: NAME",
        "m.yaml:12: audit.allow[5].reasn: unknown key 'reasn' in an allowance; did you mean 'reason'?",
        "m.yaml:12: audit.allow[5].reason: expected a reason, got '  '; say why the finding is accepted, for whoever "
        "looks at it next",
    ]
    assert _problems("audit: [fail]\n")[0].startswith("m.yaml:3: audit: expected a mapping")
    assert _problems("audit: {python_severity: huge}\n") == [
        "m.yaml:3: audit.python_severity: expected one of low, medium, high, critical, got 'huge'; valid choices: "
        "low, medium, high, critical"]


def _result(*findings: Finding, sources=None) -> AuditResult:
    sources = sources or (SourceStatus("debian-security bookworm-security", CHECKED, "read", "2026-12-04T03:54:28Z"),
                          SourceStatus("osv", CHECKED, "read", "2026-11-30"))
    return AuditResult("img", "sha256:" + "a" * 64, sources, findings)


OS = Finding("debian-security bookworm-security", "libssl3", "3.0.11-1~deb12u2", "3.0.17-1~deb12u3",
             ("CVE-2025-9230",), source_package="openssl", date="2026-12-04T03:54:28Z")
PY_LOW = Finding("osv", "urllib3", "1.26.4", "1.26.5", ("PYSEC-2021-108", "CVE-2021-33503"), "low", "python")
PY_HIGH = Finding("osv", "setuptools", "65.5.0", "65.5.1", ("PYSEC-2022-43012",), "high", "python")


def test_findings_are_judged_by_the_policy():
    doc = parse_matrix(BASE + "audit:\n  python_severity: medium\n  allow:\n"
                       "    - {id: CVE-2025-9230, package: libssl3, reason: no TLS server, expires: 2027-03-31}\n",
                       "m.yaml")
    assert doc.problems == [] and doc.audit is not None
    result = _result(OS, PY_LOW, PY_HIGH)
    judged = judge_all(result, doc.audit)
    assert [(j.finding.package, j.violates, bool(j.allowed_by)) for j in judged] == \
        [("libssl3", False, True), ("urllib3", False, False), ("setuptools", True, False)]
    assert exit_code([(result, judged)]) == EXIT_VIOLATION
    text = format_text(result, judged)
    assert "libssl3 3.0.11-1~deb12u2 -> 3.0.17-1~deb12u3  CVE-2025-9230  allowed (no TLS server, until 2027-03-31)" in text
    assert "setuptools 65.5.0 -> 65.5.1 high  PYSEC-2022-43012  VIOLATION" in text
    assert "debian-security bookworm-security: checked, 1 finding(s)" in text
    two = _result(dataclasses.replace(PY_HIGH, source="python osv+pypi"),
                  sources=(SourceStatus("python osv", CHECKED, "read"), SourceStatus("python pypi", CHECKED, "asked")))
    assert "python osv: checked, 1 finding(s)" in format_text(two, []) and \
        "python pypi: checked, 1 finding(s)" in format_text(two, [])
    doc = to_json(result, judged)
    assert doc["findings"][0]["allowed"]["reason"] == "no TLS server" and doc["findings"][2]["violates"] is True
    # the default policy (no `audit:`): any security fix fails; fail_on none lets OS fixes pass
    assert exit_code([(_result(OS), judge_all(_result(OS), DEFAULT))]) == EXIT_VIOLATION
    relaxed = parse_matrix(BASE + "audit: {fail_on: none}\n", "m.yaml").audit
    assert relaxed is not None and exit_code([(_result(OS), judge_all(_result(OS), relaxed))]) == EXIT_CLEAN


def test_nothing_is_called_clean_that_was_not_checked():
    result = _result(sources=(SourceStatus("debian-security bookworm-security", NOT_CHECKED,
                                           "http://deb.debian.org/...: not reachable"),
                              SourceStatus("osv", NOT_CHECKED, "no OSV database given")))
    judged = judge_all(result, DEFAULT)
    assert exit_code([(result, judged)]) == EXIT_NOT_CHECKED
    text = format_text(result, judged)
    assert "NOT CHECKED: http://deb.debian.org/...: not reachable" in text and "clean" not in text
    assert " 0 " not in text and "0 finding" not in text
    assert exit_code([(_result(), [])]) == EXIT_CLEAN
    assert exit_code([(AuditResult("x", ""), [])]) == EXIT_NOT_CHECKED  # no source at all: not clean either


def test_audit_command_needs_something_to_audit_and_reads_the_policy_first(tmp_path):
    """Bad input is one `error:` line and exit 2, before any engine is asked."""
    got = subprocess.run([sys.executable, "-m", "imagebuild", "audit"], capture_output=True, text=True)
    assert got.returncode == 2 and got.stderr.startswith("error: give --image REF") and "Traceback" not in got.stderr
    bad = tmp_path / "m.yaml"
    bad.write_text(BASE + "audit:\n  allow:\n    - {id: CVE-2025-1, expires: 2027-01-01}\n")
    got = subprocess.run([sys.executable, "-m", "imagebuild", "audit", "-m", str(bad)], capture_output=True, text=True,
                         env={**os.environ, "DOCKER_HOST": "unix:///nonexistent.sock"})
    assert got.returncode == 2 and "m.yaml:5: audit.allow[0]: an allowance without a reason" in got.stderr
    assert "Traceback" not in got.stderr
