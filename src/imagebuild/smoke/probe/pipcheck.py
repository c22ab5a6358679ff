"""pip: `python -m pip check` in the image's own environment: every installed distribution's requirements are
installed in a version it accepts (what AWS DLC's sanity tests run). A broken requirement is a failure; an image
without pip in its python is skipped with that reason (nothing could be checked)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from probe.common import Probe

OK_LINE = "No broken requirements found."
# pip/_internal/commands/check.py's messages (pip 9 .. 25), and the platform-tag check of pip >= 23.3
_MISSING = re.compile(r"^(?P<package>\S+) (?P<version>\S+) requires (?P<requirement>.+), which is not installed\.$")
_CONFLICT = re.compile(r"^(?P<package>\S+) (?P<version>\S+) has requirement (?P<requirement>.+), but you have "
                       r"(?P<found>\S+) (?P<found_version>\S+)\.$")
_PLATFORM = re.compile(r"^(?P<package>\S+) (?P<version>\S+) is not supported on this platform\.?$")


def parse_pip_check(text: str) -> list[dict]:
    """`pip check` output -> one dict per problem: kind missing|conflict|platform|other, package, version, ..."""
    problems: list[dict] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line == OK_LINE or line.startswith(("WARNING:", "DEPRECATION:")):
            continue
        for kind, rx in (("missing", _MISSING), ("conflict", _CONFLICT), ("platform", _PLATFORM)):
            m = rx.match(line)
            if m:
                problems.append(dict(m.groupdict(), kind=kind))
                break
        else:
            problems.append({"kind": "other", "line": line})
    return problems


def describe(problem: dict) -> str:
    kind = problem["kind"]
    if kind == "missing":
        return f"{problem['package']} {problem['version']} requires {problem['requirement']} (not installed)"
    if kind == "conflict":
        return (f"{problem['package']} {problem['version']} requires {problem['requirement']}, found "
                f"{problem['found']} {problem['found_version']}")
    if kind == "platform":
        return f"{problem['package']} {problem['version']} is not supported on this platform"
    return problem["line"]


def run(p: Probe):
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONDONTWRITEBYTECODE="1",
               PIP_NO_CACHE_DIR="1")
    cmd = [sys.executable, "-m", "pip", "check"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=p.remaining(180), env=env)
    except subprocess.TimeoutExpired:
        p.check("pip.check", "failed", "pip check did not finish in time")
        return
    text = (out.stdout or "") + (out.stderr or "")
    if out.returncode != 0 and "No module named pip" in text:
        p.check("pip.check", "skipped", f"pip is not installed in {sys.executable}: pip check cannot run")
        return
    problems = parse_pip_check(out.stdout or "")
    p.doc["pip"] = {"exit": out.returncode, "problems": problems}
    if out.returncode == 0 and not problems:
        p.check("pip.check", "passed", f"{OK_LINE.rstrip('.')} ({sys.executable} -m pip check)")
    elif problems:
        p.check("pip.check", "failed", f"{len(problems)} broken requirement(s): "
                + "; ".join(describe(x) for x in problems[:10]), problems=problems[:50])
    else:
        tail = " | ".join(text.strip().splitlines()[-3:])
        p.check("pip.check", "failed", f"pip check exited {out.returncode}: {tail[-800:]}")
