"""build-report.json, build-report.md, build-report.junit.xml: the report of ONE run of one matrix.

A run (`build [--test] [--push]`, `test`, `push`) replaces its matrix's report: the header names the matrix, the
registry, the command and the run; JUnit carries only what this run did (an earlier run's failures never linger).
Each run also appends one line to history.jsonl beside it (the clearly separate history). What an image *is* (its
ID, inputs hash, when and how long it was built, its tests and pushes) comes from the record
(.imagebuild/<matrix>.state.json), so a no-op rerun shows "up to date" with the build time of the build that made
the image. Every value written is masked (`secrets.mask_tree` over the document's string values, before it is
serialised or rendered; never a pass over the written text, which could change its structure or its hashes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import fcntl
import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from imagebuild.files import open_lock_file, write_text_atomic
from imagebuild.models import ImageResult, Plan, describe_audit, describe_coverage, kernel_coverage
from imagebuild.phases import PHASES_KEY, STEP_KINDS, Phase, phases_from_json, phases_to_json
from imagebuild.report import stored
from imagebuild.report.budget import largest_layers
from imagebuild.report.layers import format_layers
from imagebuild.secrets import mask_tree, redact, redact_host
from imagebuild.smokeresult import SmokeResult
from imagebuild.units import format_size

JSON_NAME = "build-report.json"
MD_NAME = "build-report.md"
JUNIT_NAME = "build-report.junit.xml"
SCHEMA = 2
HISTORY_NAME = "history.jsonl"
_FIELDS = [f.name for f in dataclasses.fields(ImageResult)]


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def result_to_row(result: ImageResult | dict[str, Any]) -> dict[str, Any]:
    row = dataclasses.asdict(result) if dataclasses.is_dataclass(result) else dict(result)
    masked: dict[str, Any] = mask_tree(row)  # a dict's masking is a dict
    return masked


def row_to_result(row: dict[str, Any]) -> ImageResult:
    """A report row back as an ImageResult (unknown keys ignored)."""
    known = {k: v for k, v in row.items() if k in _FIELDS}
    known.setdefault("flavor", "")
    known.setdefault("inputs_hash", "")
    known.setdefault("versions", {})
    known[PHASES_KEY] = _phases(row)
    return ImageResult(**known)


def load_report(report_dir: str | Path) -> dict[str, Any]:
    """The JSON document (`{"schema", "run", "matrix", "registry", "images": [row, ...]}`); empty when absent;
    stored.ReportError (exit 2, one line) when damaged."""
    return stored.load_report(Path(report_dir) / JSON_NAME,
                              {"schema": SCHEMA, "run": {}, "matrix": None, "registry": None, "images": []})


@contextlib.contextmanager
def _locked(report_dir: Path) -> Iterator[None]:
    with open_lock_file(report_dir / ".build-report.lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def write_reports(results: list[ImageResult], report_dir: str | Path, plan: Plan | None = None,
                  run: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write this run's report (replacing the last one in REPORT_DIR) and append it to history.jsonl.

    `run`: {"command", "steps": [build|test|push ...], "registry", "started", "id"}; rows follow the plan's order."""
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    run = dict(run or {})
    run.setdefault("id", _now().replace(":", "").replace("-", "") + "-" + os.urandom(3).hex())
    run.setdefault("finished", _now())
    order = {img.tag: n for n, img in enumerate(plan.images)} if plan else {}
    # in the plan's order by the real tags, THEN masked (a password equal to a tag must not reorder the rows)
    raw = sorted((dataclasses.asdict(r) if dataclasses.is_dataclass(r) else dict(r) for r in results),
                 key=lambda r: order.get(r["tag"], len(order)))
    for r in raw:  # what the row's own test run says of its target GPUs (issue 40), for the JSON and the Markdown
        r["coverage"] = kernel_coverage(r.get("tests"), r.get("image_id"))
        r[PHASES_KEY] = phases_to_json(_phases(r))  # typed rows as JSON, seconds to the millisecond
    rows = [result_to_row(r) for r in raw]
    matrix = plan.matrix_file if plan else run.get("matrix")
    doc = {"schema": SCHEMA, "run": mask_tree(run), "matrix": redact(matrix) if matrix else None,
           "registry": redact_host(run["registry"]) if run.get("registry") else None, "images": rows}
    paths = {"json": report_dir / JSON_NAME, "md": report_dir / MD_NAME, "junit": report_dir / JUNIT_NAME,
             "history": report_dir / HISTORY_NAME}
    with _locked(report_dir):
        write_text_atomic(paths["json"], json.dumps(doc, indent=2, sort_keys=False) + "\n")
        write_text_atomic(paths["md"], render_markdown(doc))
        write_text_atomic(paths["junit"], render_junit(doc))
        stored.append_history(paths["history"], json.dumps(_history_line(doc), sort_keys=True))
    return paths


def _history_line(doc: dict[str, Any]) -> dict[str, Any]:
    return {"run": doc.get("run"), "matrix": doc.get("matrix"), "registry": doc.get("registry"),
            "images": [{"tag": r.get("tag"), "status": r.get("status"), "image_id": r.get("image_id"),
                        "inputs_hash": r.get("inputs_hash"),
                        "tests": {k: (r.get("tests") or {}).get(k) for k in ("passed", "failed", "skipped")}
                        if r.get("tests") else None,
                        "push": {k: (r.get("push") or {}).get(k) for k in ("status", "digest")}
                        if r.get("push") else None} for r in doc.get("images") or []]}


def refresh_audits(report_dir: str | Path, summaries: dict[str, dict[str, Any]]) -> int:
    """After `imagebuild audit -m`: each row of the last run's report whose image ID was just audited gets that audit
    (record/audits.audit_summary; keyed by image ID, so a row of another image keeps its own), and the Markdown and
    JUnit are re-rendered; no history line (no build/test/push ran). Returns the rows changed (0: no report)."""
    report_dir = Path(report_dir)
    if not (report_dir / JSON_NAME).is_file():
        return 0
    with _locked(report_dir):
        doc = load_report(report_dir)
        changed = 0
        for row in doc.get("images") or []:
            summary = summaries.get(str(row.get("image_id") or ""))
            if summary is not None and summary.get("image_id") == row.get("image_id"):
                row["audit"], changed = mask_tree(summary), changed + 1
        if changed:
            write_text_atomic(report_dir / JSON_NAME, json.dumps(doc, indent=2, sort_keys=False) + "\n")
            write_text_atomic(report_dir / MD_NAME, render_markdown(doc))
            write_text_atomic(report_dir / JUNIT_NAME, render_junit(doc))
    return changed


def rerender(report_dir: str | Path) -> dict[str, Path]:
    """Re-write the Markdown and JUnit files from build-report.json."""
    report_dir = Path(report_dir)
    doc = load_report(report_dir)
    paths = {"md": report_dir / MD_NAME, "junit": report_dir / JUNIT_NAME}
    write_text_atomic(paths["md"], render_markdown(doc))
    write_text_atomic(paths["junit"], render_junit(doc))
    return paths


# -- Markdown --------------------------------------------------------------------------------------------------

_STATUS_MARK = {"built": "✅ built", "up-to-date": "✅ up-to-date", "failed": "❌ failed",
                "not-built": "⏭️ not built", "skipped": "⏭️ skipped", "planned": "· planned"}


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _status_cell(r: dict[str, Any]) -> str:
    status = r.get("status") or "planned"
    text = _STATUS_MARK.get(status, status)
    if r.get("source") and r["source"].startswith("registry"):
        text += f" (in {r['source'].partition(' ')[2]})"
    elif status == "up-to-date" and r.get("built_at"):
        text += f" (built {r['built_at']})"
    elif status == "built" and isinstance(r.get("rebuilt_because"), str) and r["rebuilt_because"]:
        text += f" ({r['rebuilt_because']})"
    return text


def _smoke(r: dict[str, Any]) -> SmokeResult | None:
    """The row's smoke result (smokeresult.py; a row written before it was versioned reads as version 1); one
    `error:` line naming the row when it is of another version or damaged."""
    tests = r.get("tests")
    return SmokeResult.from_json(tests, f"{JSON_NAME}: the row of {r.get('tag')}: tests") if tests else None


def _tests_cell(tests: SmokeResult | None) -> str:
    if tests is None:
        return "–"
    cell = f"{tests.passed}/{tests.failed}/{tests.skipped}"
    if tests.failed:
        return f"❌ {cell}"
    return f"{cell} (up to date, {tests.at})" if tests.up_to_date else cell


def _push_cell(push: dict[str, Any] | None) -> str:
    if not push:
        return "–"
    status = push.get("status", "?")
    digest = push.get("digest")
    short = f"`{digest[:19]}`" if digest else ""
    mark = {"pushed": "⬆️", "unchanged": "=", "failed": "❌", "skipped": "⏭️"}.get(status, "")
    return " ".join(p for p in (mark, status, short) if p)


def _gpus_cell(r: dict[str, Any]) -> str:
    """The target GPUs as the row's own test run found them: native / PTX JIT only / no code, else "not checked"
    (a CPU image, no CUDA library, no test run, a run of another image)."""
    return describe_coverage(kernel_coverage(r.get("tests"), r.get("image_id")), r.get("gpus"))


def _driver_cell(r: dict[str, Any]) -> str:
    if r.get("min_driver"):
        return f"≥ {r['min_driver']}"
    return "not needed (no target GPUs)" if not r.get("gpus") else "not labelled"


def _audit_cell(r: dict[str, Any]) -> str:
    """The record's audit of exactly this row's image ID (a result of another image ID is not this one's)."""
    audit = r.get("audit") if isinstance(r.get("audit"), dict) else None
    return describe_audit(audit, r.get("image_id"))


def _phases(r: dict[str, Any]) -> list[Phase]:
    """The row's phases (phases.py; none in a report written before they were measured); one `error:` line naming
    the row when one is damaged."""
    return phases_from_json(r.get(PHASES_KEY), f"{JSON_NAME}: the row of {r.get('tag')}: {PHASES_KEY}")


FOLD_CACHED_BELOW = 1.0  # seconds: cached steps quicker than this are one row ("N cached steps")
FOLD_BELOW = 0.5  # seconds: other steps quicker than this are one row too


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def phase_table(phases: list[Phase]) -> list[str]:
    """The compact Markdown table of one image's phases: phase, seconds, cached; quick cached steps and quick steps
    each folded into one row (the JSON keeps every step)."""
    lines = ["| phase | seconds | cached |", "|---|---:|---|"]
    folded: dict[bool, list[Phase]] = {True: [], False: []}
    after_steps = len(lines)  # the folded rows go after the last step shown
    for p in phases:
        is_step = p.kind in STEP_KINDS
        if is_step and p.cached and (p.seconds or 0.0) < FOLD_CACHED_BELOW:
            folded[True].append(p)
            continue
        if is_step and not p.cached and p.seconds is not None and p.seconds < FOLD_BELOW:
            folded[False].append(p)
            continue
        name = " ".join((p.name if p.kind == "step" else f"{p.kind}: {p.name}").split())
        if len(name) > 100:
            name = name[:99] + "…"
        cached = "–" if p.cached is None else ("yes" if p.cached else "no")
        lines.append(f"| {_cell(name)} | {_seconds(p.seconds)} | {cached} |")
        if is_step:
            after_steps = len(lines)
    rows = []
    for from_cache, quick in folded.items():
        if quick:
            what = f"{len(quick)} cached step(s) under {FOLD_CACHED_BELOW:g} s" if from_cache else \
                f"{len(quick)} more step(s) under {FOLD_BELOW:g} s each"
            rows.append(f"| {what} | {sum(p.seconds or 0.0 for p in quick):.1f} | {'yes' if from_cache else 'no'} |")
    return lines[:after_steps] + rows + lines[after_steps:]


def _short_tag(tag: str) -> str:
    return tag.rsplit(":", 1)[-1] if ":" in tag.rsplit("/", 1)[-1] else tag


def render_markdown(doc: dict[str, Any]) -> str:
    """The Markdown of a report document, rendered from its masked values (never masked as a whole text: a password
    holding `|` or a digest fragment would break the table or the short IDs)."""
    doc = mask_tree(doc)
    rows = doc.get("images") or []
    run = doc.get("run") or {}
    title = f"imagebuild {run.get('command') or 'report'}" + (f": `{doc['matrix']}`" if doc.get("matrix") else "")
    lines = [f"### {title}", ""]
    facts = [f"registry `{doc['registry']}`" if doc.get("registry") else "registry: none (local tags)"]
    if run.get("id"):
        facts.append(f"run `{run['id']}`")
    if run.get("finished"):
        facts.append(f"finished {run['finished']}")
    if run.get("tool_version"):
        facts.append(f"imagebuild {run['tool_version']}")
    lines += [" · ".join(facts), ""]
    if not rows:
        return "\n".join(lines + ["No images in this report.", ""])
    repos = sorted({r["tag"].rsplit(":", 1)[0] for r in rows if ":" in r["tag"].rsplit("/", 1)[-1]})
    if repos:
        lines += ["Repository: " + ", ".join(f"`{r}`" for r in repos), ""]
    lines += ["| image | flavor | status | image ID | size | build | tests p/f/s | GPUs | driver | audit | push |",
              "|---|---|---|---|---:|---:|---|---|---|---|---|"]
    counts: dict[str, int] = {}
    for r in rows:
        status = r.get("status") or "planned"
        counts[status] = counts.get(status, 0) + 1
        lines.append("| " + " | ".join(_cell(c) for c in (
            f"`{_short_tag(r['tag'])}`", r.get("flavor") or "", _status_cell(r),
            f"`{r['image_id'][7:19]}`" if r.get("image_id") else "–", format_size(r.get("size")),
            _duration(r.get("build_seconds")), _tests_cell(_smoke(r)), _gpus_cell(r), _driver_cell(r),
            _audit_cell(r), _push_cell(r.get("push")))) + " |")
    lines += ["", ", ".join(f"{n} {s}" for s, n in counts.items()), ""]
    problems = []
    for r in rows:
        short = _short_tag(r["tag"])
        if r.get("error"):
            problems.append(f"- `{short}`: {_cell(r['error'])[:600]}")
        tests = _smoke(r)
        for check in tests.failures() if tests else []:
            problems.append(f"- `{short}` test `{check.name}`: {_cell(check.reason)[:300]}")
        push = r.get("push") or {}
        if push.get("status") in ("failed", "skipped") and (push.get("error") or push.get("reason")):
            problems.append(f"- `{short}` push {push['status']}: {_cell(push.get('error') or push.get('reason'))}")
    if problems:
        lines += ["<details open><summary>Problems</summary>", "", *problems, "", "</details>", ""]
    sboms = [f"- `{_short_tag(r['tag'])}`: `{Path(r['sbom']['path']).name}` ({r['sbom'].get('spec', 'CycloneDX')}, "
             f"{r['sbom'].get('components', '?')} components, `{r['sbom']['sha256'][:19]}`)"
             for r in rows if (r.get("sbom") or {}).get("sha256")]
    if sboms:
        lines += ["<details><summary>SBOMs (beside this report, in sbom/)</summary>", "", *sboms, "", "</details>", ""]
    layered = [r for r in rows if r.get("env_layers")]
    if layered:
        lines += ["<details><summary>Environment layers (least changing first)</summary>", ""]
        for r in layered:
            lines += [f"`{_short_tag(r['tag'])}`:", "", "```text", *format_layers(r["env_layers"]), "```", ""]
        lines += ["</details>", ""]
    timed = [(r, phases) for r in rows if (phases := _phases(r))]
    if timed:
        lines += ["<details><summary>Phases: where each image's time went in this run (seconds; parallel stages "
                  "overlap)</summary>", ""]
        for r, phases in timed:
            status = r.get("status") or "planned"
            took = f", build {_duration(r.get('build_seconds'))}" if status in ("built", "failed") else ""
            lines += [f"`{_short_tag(r['tag'])}` ({status}{took}):", "",
                      *phase_table(phases), ""]
        lines += ["</details>", ""]
    for r in rows:
        d = r.get("diff")
        if not d:
            continue
        changed = ", ".join(f"{what} +{d[what]['added']} -{d[what]['removed']} ~{d[what]['changed']}"
                           for what in ("os", "python") if d.get(what))
        lines += [f"<details><summary>`{_short_tag(r['tag'])}` against the image before "
                  f"(`{str(d.get('against'))[7:19]}`): {changed}</summary>", "", "```text",
                  str(d.get("text") or "").rstrip(), "```", "", "</details>", ""]
    return "\n".join(lines)


# -- JUnit -----------------------------------------------------------------------------------------------------

_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _x(text: object) -> str:
    return _XML_BAD.sub("?", redact(str(text)))


def render_junit(doc: dict[str, Any]) -> str:
    """Three suites, each only for the steps this run took: `build` (a case per image with a build status),
    `smoke` (a case per tested image: failed checks as its failure) and `push` (a case per push)."""
    doc = mask_tree(doc)
    rows = doc.get("images") or []
    steps = set((doc.get("run") or {}).get("steps") or ("build", "test", "push"))
    root = ET.Element("testsuites", name="imagebuild")
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    suites = {"build": ET.SubElement(root, "testsuite", name="build"),
              "smoke": ET.SubElement(root, "testsuite", name="smoke"),
              "push": ET.SubElement(root, "testsuite", name="push")}
    counts = {name: {"tests": 0, "failures": 0, "skipped": 0, "time": 0.0} for name in suites}
    for r in rows:
        short = _short_tag(r["tag"])
        status = r.get("status")
        if "build" in steps and status and status != "planned":
            c = counts["build"]
            case = ET.SubElement(suites["build"], "testcase", classname=f"build.{r.get('flavor') or 'image'}",
                                 name=_x(short), time=f"{r.get('build_seconds') or 0:.3f}")
            c["tests"] += 1
            c["time"] += r.get("build_seconds") or 0
            if status == "failed":
                c["failures"] += 1
                ET.SubElement(case, "failure", message=_x((r.get("error") or "build failed")[:200])).text = \
                    _x(r.get("error") or "build failed")
            elif status in ("not-built", "skipped"):
                c["skipped"] += 1
                ET.SubElement(case, "skipped", message=_x(r.get("error") or status))
            out = [f"tag: {r['tag']}", f"status: {status}", f"image: {r.get('image_id')}",
                   f"size: {format_size(r.get('size'))}"]
            for size, step in largest_layers(row_to_result(r)):
                out.append(f"layer {format_size(size)}: {step}")
            ET.SubElement(case, "system-out").text = _x("\n".join(out))
        tests = _smoke(r) if "test" in steps else None
        if tests is not None:
            c = counts["smoke"]
            case = ET.SubElement(suites["smoke"], "testcase", classname=f"smoke.{r.get('flavor') or 'image'}",
                                 name=_x(short), time=f"{tests.seconds or 0:.3f}")
            c["tests"] += 1
            c["time"] += tests.seconds or 0
            if tests.failed:
                c["failures"] += 1
                text = "\n".join(f"{ch.name}: {ch.reason}" for ch in tests.failures()) or "smoke test failed"
                ET.SubElement(case, "failure", message=_x(f"{tests.failed} check(s) failed")).text = _x(text)
            ET.SubElement(case, "system-out").text = _x(
                f"passed {tests.passed}, failed {tests.failed}, skipped {tests.skipped}"
                + (f" (up to date: result of {tests.at})" if tests.up_to_date else ""))
        push = r.get("push")
        if "push" in steps and push:
            c = counts["push"]
            case = ET.SubElement(suites["push"], "testcase", classname="push", name=_x(short),
                                 time=f"{push.get('seconds') or 0:.3f}")
            c["tests"] += 1
            c["time"] += push.get("seconds") or 0
            if push.get("status") == "failed":
                c["failures"] += 1
                ET.SubElement(case, "failure", message=_x((push.get("error") or "push failed")[:200])).text = \
                    _x(push.get("error") or "push failed")
            elif push.get("status") == "skipped":
                c["skipped"] += 1
                ET.SubElement(case, "skipped", message=_x(push.get("reason") or "skipped"))
            ET.SubElement(case, "system-out").text = _x(
                f"status: {push.get('status')}\ndigest: {push.get('digest')}\ntags: {', '.join(push.get('tags') or [])}")
    for name, suite in suites.items():
        c = counts[name]
        suite.set("tests", str(c["tests"]))
        suite.set("failures", str(c["failures"]))
        suite.set("errors", "0")
        suite.set("skipped", str(c["skipped"]))
        suite.set("time", f"{c['time']:.3f}")
        for k in totals:
            totals[k] += int(c[k])  # counts of tests; only "time" (not in totals) is a float
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("errors", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
