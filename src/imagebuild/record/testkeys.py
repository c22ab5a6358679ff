"""Smoke results are a property of the content: keyed by image ID + smoke-suite version + expectations + the
options and host that shape the outcome, never by tag.

- `suite`: a digest of the probe and suite sources (smoke.runner.suite_version()): a new check re-tests everything;
- `expect`: a digest of the expectations (the plan's pins + --expect), so `--expect torch=X` is its own result;
- `options`: --require-gpu / --perf;
- `where`: "cpu" or the GPU model(s) the run saw — a pass on a CPU host skipped every GPU check, so it says nothing
  about a GPU host.

Only passing results are reused ("up to date"); a failed one is kept for the report but always re-run.

Each result is a smokeresult.SmokeResult's JSON with its schema version ("schema_version"; one of another version,
or a damaged one, is never reused: the image is tested again). It keeps its `cases` (every check: name, status,
reason, figures when any), so an up-to-date image's JUnit and JSON files are the recorded run's. Results stored before
the cases were kept have only `checks` (those that did not pass); they stay readable: `recorded_cases` says None for
them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from imagebuild.record.store import Record, now
from imagebuild.smokeresult import (
    RESULT_SCHEMA_VERSION,
    VERSION_KEY,
    CheckResult,
    SmokeResult,
    SmokeResultError,
    of_version,
)


def digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def test_key(image_id: str, suite: str, expectations: dict[str, Any], options: dict[str, Any], where: str) -> str:
    return digest({"image": image_id, "suite": suite, "expect": digest(expectations), "options": options,
                   "where": where})


test_key.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def _readable(hit: dict[str, Any] | None) -> bool:
    """A stored result this tool reads as a smokeresult.SmokeResult (of its schema version, or written before it
    had one, and not damaged): only such a result is reused; any other is tested again."""
    if not of_version(hit):
        return False
    try:
        SmokeResult.from_json(hit, "record")
    except SmokeResultError:
        return False
    return True


def passed_result(rec: Record | None, key: str) -> dict[str, Any] | None:
    """The stored result under `key` when it passed (no failed check), else None."""
    if rec is None:
        return None
    hit = rec.tests.get(key)
    if hit and _readable(hit) and not hit.get("failed") and hit.get("passed", 0) + hit.get("skipped", 0) > 0:
        return hit
    return None


def store_result(rec: Record, key: str, image_id: str, suite: str, expectations: dict[str, Any], options: dict[str, Any], where: str,
                 result: SmokeResult) -> dict[str, Any]:
    """Keep the summary of a run (counts, every case, failed/skipped checks with reasons) under its key: a
    SmokeResult's JSON (its schema version included) with the key's parts, `checks` the cases that did not pass."""
    summary = {
        VERSION_KEY: RESULT_SCHEMA_VERSION,
        "image_id": image_id, "suite": suite, "expect": digest(expectations), "options": options, "where": where,
        "at": now(), "passed": result.passed, "failed": result.failed, "skipped": result.skipped,
        "seconds": result.seconds,
        "checks": [c.to_json() for c in result.checks if c.status != "passed"],
        "cases": [_case(c) for c in result.checks],
    }
    rec.tests[key] = summary
    return summary


def _case(check: CheckResult) -> dict[str, Any]:
    case: dict[str, Any] = {"name": check.name, "status": check.status, "reason": check.reason}
    if check.figures:
        case["figures"] = dict(check.figures)
    return case


def recorded_cases(result: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Every check of a stored run, in the suite's order; None for a result stored before cases were kept."""
    cases = result.get("cases")
    return list(cases) if isinstance(cases, list) else None


def tested_ok(rec: Record | None, image_id: str, suite: str, expectations: dict[str, Any]) -> dict[str, Any] | None:
    """Any passing result for this content and suite with these expectations (any options or host): what push's
    "tested" gate asks."""
    if rec is None:
        return None
    want = digest(expectations)
    for hit in rec.tests.values():
        if (hit.get("image_id") == image_id and hit.get("suite") == suite and hit.get("expect") == want
                and _readable(hit) and not hit.get("failed") and hit.get("passed", 0) > 0):
            return hit
    return None


def failed_result(rec: Record | None, image_id: str, suite: str, expectations: dict[str, Any]) -> dict[str, Any] | None:
    if rec is None:
        return None
    want = digest(expectations)
    for hit in rec.tests.values():
        if (hit.get("image_id") == image_id and hit.get("suite") == suite and hit.get("expect") == want
                and hit.get("failed")):
            return hit
    return None
