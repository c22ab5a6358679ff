"""What an up-to-date test result writes: the same per-image files a run writes (`<junit dir>/<image>.xml`,
`<results dir>/<image>.json`), made from the recorded run's cases and saying when and where that run happened
(testsuite timestamp + hostname, properties, a system-out line), so a CI job that publishes per-image JUnit finds
one file per image whether or not the suite ran again.

A record written before the cases were kept (record.testkeys) holds only the checks that did not pass: those are
listed, plus one case that counts the passed checks it does not name."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from imagebuild.files import write_text_atomic
from imagebuild.smoke.runner import safe_name
from imagebuild.smokeresult import CheckResult, SmokeResult


def recorded_tests(hit: dict[str, Any], image_id: str, flavor: str, where: str) -> dict[str, Any]:
    """The report row's `tests` for an up-to-date image: the recorded counts and every recorded case (the record's
    `cases`; SmokeResult.from_json reads them), as a smokeresult.SmokeResult's JSON."""
    result = SmokeResult.from_json(hit, f"the record's test result of {image_id}")
    return result.replace(image=image_id, flavor=flavor, up_to_date=True, gpu=where != "cpu", where=where).to_json()


def _case_element(suite: ET.Element, check: CheckResult) -> None:
    section, _, rest = check.name.partition("/")
    case = ET.SubElement(suite, "testcase", classname=f"smoke.{section}" if rest else "smoke",
                         name=rest or check.name, time="0")
    if check.status == "failed":
        ET.SubElement(case, "failure", message=check.reason[:200] or "failed").text = check.reason
    elif check.status == "skipped":
        ET.SubElement(case, "skipped", message=check.reason or "skipped")


def junit_text(tests: dict[str, Any], label: str) -> str:
    """One testsuite named after the image, as the suite's own --junitxml names it, from a recorded run (a
    SmokeResult's JSON: recorded_tests)."""
    result = SmokeResult.from_json(tests, f"the recorded test result of {label}")
    unnamed = result.passed - sum(1 for c in result.checks if c.status == "passed")
    at, where = result.at or "?", result.where or "?"
    suite_attrs = {"name": label, "tests": str(len(result.checks) + (1 if unnamed > 0 else 0)),
                   "failures": str(result.failed), "errors": "0", "skipped": str(result.skipped),
                   "time": f"{result.seconds or 0:.3f}", "timestamp": at, "hostname": where}
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", suite_attrs)
    props = ET.SubElement(suite, "properties")
    for key, value in (("up_to_date", "true"), ("ran_at", at), ("ran_where", where),
                       ("image_id", result.image or ""), ("suite", result.suite or "")):
        ET.SubElement(props, "property", name=key, value=value)
    for check in result.checks:
        _case_element(suite, check)
    if unnamed > 0:
        _case_element(suite, CheckResult(f"recorded/{unnamed} passed checks (this record does not name them)",
                                         "passed"))
    ET.SubElement(suite, "system-out").text = (
        f"up to date: not run again; these are the cases of the run of {at} on {where} "
        f"(passed {result.passed}, failed {result.failed}, skipped {result.skipped})")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_recorded(tests: dict[str, Any], label: str, junit_dir: Path | None, result_dir: Path | None) -> None:
    """Write the per-image files of an up-to-date result; their paths go into `tests` as a run's do."""
    base = safe_name(label)
    if junit_dir is not None:
        path = Path(junit_dir).resolve() / f"{base}.xml"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, junit_text(tests, label))
        tests["junit"] = str(path)
    if result_dir is not None:
        path = Path(result_dir).resolve() / f"{base}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tests["result_json"] = str(path)
        write_text_atomic(path, json.dumps(tests, indent=2, default=str))
