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
from imagebuild.smokeresult import SmokeResult


def recorded_tests(hit: dict[str, Any], image_id: str, flavor: str, where: str) -> dict[str, Any]:
    """The report row's `tests` for an up-to-date image: the recorded counts and every recorded case (the record's
    `cases`; SmokeResult.from_json reads them), as a smokeresult.SmokeResult's JSON."""
    result = SmokeResult.from_json(hit, f"the record's test result of {image_id}")
    return result.replace(image=image_id, flavor=flavor, up_to_date=True, gpu=where != "cpu", where=where).to_json()


def _case_element(suite: ET.Element, check: dict[str, Any]) -> None:
    name = str(check.get("name") or "?")
    section, _, rest = name.partition("/")
    case = ET.SubElement(suite, "testcase", classname=f"smoke.{section}" if rest else "smoke", name=rest or name,
                         time="0")
    status, reason = check.get("status"), str(check.get("reason") or "")
    if status == "failed":
        ET.SubElement(case, "failure", message=reason[:200] or "failed").text = reason
    elif status == "skipped":
        ET.SubElement(case, "skipped", message=reason or "skipped")


def junit_text(tests: dict[str, Any], label: str) -> str:
    """One testsuite named after the image, as the suite's own --junitxml names it, from a recorded run."""
    checks = list(tests.get("checks") or [])
    unnamed = int(tests.get("passed") or 0) - sum(1 for c in checks if c.get("status") == "passed")
    at, where = str(tests.get("at") or "?"), str(tests.get("where") or "?")
    suite_attrs = {"name": label, "tests": str(len(checks) + (1 if unnamed > 0 else 0)),
                   "failures": str(tests.get("failed") or 0), "errors": "0", "skipped": str(tests.get("skipped") or 0),
                   "time": f"{tests.get('seconds') or 0:.3f}", "timestamp": at, "hostname": where}
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", suite_attrs)
    props = ET.SubElement(suite, "properties")
    for key, value in (("up_to_date", "true"), ("ran_at", at), ("ran_where", where),
                       ("image_id", str(tests.get("image") or "")), ("suite", str(tests.get("suite") or ""))):
        ET.SubElement(props, "property", name=key, value=value)
    for check in checks:
        _case_element(suite, check)
    if unnamed > 0:
        _case_element(suite, {"name": f"recorded/{unnamed} passed checks (this record does not name them)",
                              "status": "passed"})
    ET.SubElement(suite, "system-out").text = (
        f"up to date: not run again; these are the cases of the run of {at} on {where} "
        f"(passed {tests.get('passed', 0)}, failed {tests.get('failed', 0)}, skipped {tests.get('skipped', 0)})")
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
