"""The smoke result as one versioned type: what the runner makes of the probe's JSON for one image, and what the
record, the report (JSON, Markdown, JUnit) and the catalog read back.

    result = SmokeResult.from_json(doc, "build-report.json: images[2].tests")   # SmokeResultError when not one
    result.failed, [c.name for c in result.failures()]
    doc = result.to_json()                                                      # {"schema_version": 1, ...}

`CheckResult` is one check (name, status passed|failed|skipped, reason, figures: the JSON values it measured);
`SmokeResult` is one image's run: the counts, every check, where and how it ran (image, flavor, container, GPUs,
notes, emulation), its timings (the suite's, the probe's, per section and per side place), the probe's version and
the files it wrote; a result reused from the record (pipeline/cached.py) adds when and where the recorded run was.
The JSON Schema of `to_json()` is smokeresult.schema.json beside this module (tests/unit/test_smoke_result_type.py
validates real results against it).

The in-image probe (smoke/probe/) stays untyped and imports nothing of imagebuild: its JSON is parsed here, at the
boundary (runner._collect). `to_json()` writes RESULT_SCHEMA_VERSION under "schema_version"; `from_json` checks
every key's type and refuses a document of another version or a damaged one with SmokeResultError (a UsageError:
exit 2, ONE line naming where the document came from, the key, what was expected and what was found).

Documents written before this type existed (the same keys, no "schema_version") are read as version 1: their keys
and types are exactly what version 1 names, and from_json checks them the same way, so a damaged one is refused just
the same; one without its counts (hand-made: the tool always wrote them) gets those of the checks it lists, so a
failed check stays a failure. Their reuse is unchanged: a recorded pass is reused only under its test key (image ID +
suite digest + expectations + options + host: record/testkeys.py), so an old pass counts only for the same checks.
A record entry of ANOTHER version (a newer imagebuild's) or a damaged one is never reused as a pass: the image is
tested again (record/testkeys.passed_result), and the catalog leaves it out ("not tested" rather than a guess).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from imagebuild.errors import UsageError

RESULT_SCHEMA_VERSION = 1
VERSION_KEY = "schema_version"
SCHEMA_PATH = Path(__file__).resolve().with_name("smokeresult.schema.json")
STATUSES = ("passed", "failed", "skipped")
Status = Literal["passed", "failed", "skipped"]


class SmokeResultError(UsageError):
    """A smoke result document that cannot be used: another schema version, a key of the wrong type (exit 2)."""


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "true/false"
    return {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


class _Missing:
    def __repr__(self) -> str:
        return "nothing (the key is missing)"


_MISSING = _Missing()


def _shown(value: object) -> str:
    if value is _MISSING:
        return repr(value)
    text = json.dumps(value, default=str) if not isinstance(value, (dict, list)) else _kind(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Reader:
    """Typed reads of one JSON object, each failure one SmokeResultError line naming `source` and the key path."""

    def __init__(self, doc: object, source: str, path: str) -> None:
        self.source, self.path = source, path
        if not isinstance(doc, dict):
            self.fail("", "an object", doc)
        self.doc: dict[str, Any] = cast(dict[str, Any], doc)

    def fail(self, key: str, expected: str, found: object) -> None:
        at = f"{self.path}.{key}" if self.path and key else (key or self.path or "(the document)")
        raise SmokeResultError(f"{self.source}: smoke result {at}: expected {expected}, found {_shown(found)}")

    def value(self, key: str, types: tuple[type, ...], expected: str, required: bool = False) -> Any:
        if key not in self.doc or (self.doc[key] is None and not required):
            if required:
                self.fail(key, expected, _MISSING)
            return None
        v = self.doc[key]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            self.fail(key, expected, v)
        return v

    def text(self, key: str) -> str | None:
        return cast("str | None", self.value(key, (str,), "a string or null"))

    def count(self, key: str, tallied: int | None = None) -> int:
        """The count under `key`; `tallied` (a document written before the type): when the key is missing, the
        checks it lists with that status (the reports of then always had the counts; a hand-made one may not)."""
        if tallied is not None and key not in self.doc:
            return tallied
        v = cast(int, self.value(key, (int,), "a whole number >= 0", required=True))
        if v < 0:
            self.fail(key, "a whole number >= 0", v)
        return v

    def whole(self, key: str) -> int | None:
        return cast("int | None", self.value(key, (int,), "a whole number or null"))

    def number(self, key: str) -> float | None:
        return cast("float | None", self.value(key, (int, float), "a number or null"))

    def flag(self, key: str) -> bool | None:
        return cast("bool | None", self.value(key, (bool,), "true/false or null"))

    def mapping(self, key: str, values: tuple[type, ...], expected: str) -> dict[str, Any] | None:
        got = cast("dict[str, Any] | None", self.value(key, (dict,), f"an object of {expected}"))
        for k, v in (got or {}).items():
            if not isinstance(v, values) or (isinstance(v, bool) and bool not in values):
                self.fail(f"{key}.{k}", expected, v)
        return got

    def strings(self, key: str) -> tuple[str, ...]:
        got = cast("list[Any] | None", self.value(key, (list,), "a list of strings"))
        for n, v in enumerate(got or []):
            if not isinstance(v, str):
                self.fail(f"{key}[{n}]", "a string", v)
        return tuple(got or ())


@dataclass(frozen=True)
class CheckResult:
    """One check of a smoke run, as the suite judged it."""

    name: str  # "versions/version[torch]", "uid.home_writable", "container/start", ...
    status: Status
    reason: str = ""
    figures: Mapping[str, Any] = field(default_factory=dict)  # what it measured (JSON values)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "reason": self.reason, "figures": dict(self.figures)}

    @classmethod
    def from_json(cls, doc: object, source: str, path: str = "checks[0]") -> CheckResult:
        r = _Reader(doc, source, path)
        name = cast(str, r.value("name", (str,), "a string (the check's name)", required=True))
        if not name:
            r.fail("name", "a check's name", name)
        status = r.value("status", (str,), "one of " + ", ".join(STATUSES), required=True)
        if status not in STATUSES:
            r.fail("status", "one of " + ", ".join(STATUSES), status)
        figures = r.value("figures", (dict,), "an object (the check's figures)")
        return cls(name, cast(Status, status), r.text("reason") or "", dict(figures or {}))


# the keys of SmokeResult.to_json() besides the counts and checks, in the order written; None/empty ones are left out
_OPTIONAL = ("image", "image_id", "flavor", "container", "gpus_requested", "gpu", "where", "emulated", "notes",
             "side_containers", "start_seconds", "seconds", "docker_exec", "probe_version", "probe_seconds",
             "probe_section_seconds", "probe_wall_seconds", "extra_probe_seconds", "probe_error", "pytest_exit",
             "remove_error", "junit", "log", "result_json", "suite", "expect", "options", "at", "up_to_date")


@dataclass(frozen=True)
class SmokeResult:
    """One image's smoke run (or the recorded run an up-to-date image reuses)."""

    passed: int
    failed: int
    skipped: int
    checks: tuple[CheckResult, ...] = ()  # in the suite's order; a record written before cases were kept: only
    # the checks that did not pass (`passed` then counts more than the passed checks listed)
    image: str | None = None  # the reference or image ID the run tested (a tag for an image that is missing)
    image_id: str | None = None  # the record's image ID of a reused run
    flavor: str | None = None
    container: str | None = None
    gpus_requested: bool | None = None
    gpu: bool | None = None  # the probe saw a usable GPU
    where: str | None = None  # "cpu" | "gpu:<model>[,...]" | "gpu": the host, as record/testkeys keys it
    emulated: str | None = None  # the platform the run emulated (QEMU), e.g. "linux/arm64"
    notes: tuple[str, ...] = ()
    side_containers: Mapping[str, str] = field(default_factory=dict)  # place -> its side container
    start_seconds: float | None = None
    seconds: float | None = None  # the whole run, start to removal
    docker_exec: int | None = None  # probe runs (docker exec) the suite made
    probe_version: int | None = None  # the probe's own PROBE_VERSION (smoke/probe/common.py)
    probe_seconds: float | None = None
    probe_section_seconds: Mapping[str, float] | None = None
    probe_wall_seconds: float | None = None
    extra_probe_seconds: Mapping[str, float | None] | None = None  # place -> its probe's wall time
    probe_error: str | None = None
    pytest_exit: int | None = None
    remove_error: str | None = None
    junit: str | None = None  # the files the run wrote
    log: str | None = None
    result_json: str | None = None
    suite: str | None = None  # a reused run: the suite digest, expectations digest, options, when it ran
    expect: str | None = None
    options: Mapping[str, Any] | None = None
    at: str | None = None
    up_to_date: bool = False

    def __post_init__(self) -> None:
        for key in ("passed", "failed", "skipped"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key} must be >= 0")

    @classmethod
    def tally(cls, checks: Iterable[CheckResult], **facts: Any) -> SmokeResult:
        """A result whose counts are those of `checks`."""
        rows = tuple(checks)
        counts = {s: sum(1 for c in rows if c.status == s) for s in STATUSES}
        return cls(counts["passed"], counts["failed"], counts["skipped"], rows, **facts)

    @classmethod
    def failure(cls, name: str, reason: str, **facts: Any) -> SmokeResult:
        """One failed check (the image missing, the container or the suite not running)."""
        return cls(0, 1, 0, (CheckResult(name, "failed", reason, {}),), **facts)

    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "failed"]

    def replace(self, **changes: Any) -> SmokeResult:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {VERSION_KEY: RESULT_SCHEMA_VERSION, "passed": self.passed, "failed": self.failed,
                               "skipped": self.skipped, "checks": [c.to_json() for c in self.checks]}
        for key in _OPTIONAL:
            value = getattr(self, key)
            if value is None or value == () or value is False and key == "up_to_date" or (
                    isinstance(value, Mapping) and not value and key == "side_containers"):
                continue
            out[key] = list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, Mapping) \
                else value
        return out

    @classmethod
    def from_json(cls, doc: object, source: str) -> SmokeResult:
        """The result `doc` holds; SmokeResultError (one line naming `source`, the key, what was expected and what
        was found) for another schema version or a damaged document. Keys it does not name are ignored (a record's
        own bookkeeping: `cases`, `expect`'s digest input); `cases` (every check, record/testkeys.py) wins over
        `checks` (there only those that did not pass)."""
        r = _Reader(doc, source, "")
        version = r.doc.get(VERSION_KEY, RESULT_SCHEMA_VERSION)  # none: written before the type (module docstring)
        if version != RESULT_SCHEMA_VERSION or isinstance(version, bool):
            raise SmokeResultError(
                f"{source}: smoke result {VERSION_KEY}: found {_shown(version)}, expected {RESULT_SCHEMA_VERSION} "
                "(written by another imagebuild version: test the image again with this one)")
        key = "cases" if isinstance(r.doc.get("cases"), list) else "checks"
        rows = r.value(key, (list,), "a list of checks")
        checks = tuple(CheckResult.from_json(c, source, f"{key}[{n}]") for n, c in enumerate(rows or []))
        legacy = VERSION_KEY not in r.doc
        tally = {s: sum(1 for c in checks if c.status == s) if legacy else None for s in STATUSES}
        return cls(
            passed=r.count("passed", tally["passed"]), failed=r.count("failed", tally["failed"]),
            skipped=r.count("skipped", tally["skipped"]), checks=checks,
            image=r.text("image"), image_id=r.text("image_id"), flavor=r.text("flavor"),
            container=r.text("container"), gpus_requested=r.flag("gpus_requested"), gpu=r.flag("gpu"),
            where=r.text("where"), emulated=r.text("emulated"), notes=r.strings("notes"),
            side_containers=r.mapping("side_containers", (str,), "strings") or {},
            start_seconds=r.number("start_seconds"), seconds=r.number("seconds"), docker_exec=r.whole("docker_exec"),
            probe_version=r.whole("probe_version"), probe_seconds=r.number("probe_seconds"),
            probe_section_seconds=r.mapping("probe_section_seconds", (int, float), "numbers"),
            probe_wall_seconds=r.number("probe_wall_seconds"),
            extra_probe_seconds=r.mapping("extra_probe_seconds", (int, float, type(None)), "numbers or null"),
            probe_error=r.text("probe_error"), pytest_exit=r.whole("pytest_exit"),
            remove_error=r.text("remove_error"), junit=r.text("junit"), log=r.text("log"),
            result_json=r.text("result_json"), suite=r.text("suite"), expect=r.text("expect"),
            options=r.value("options", (dict,), "an object or null"), at=r.text("at"),
            up_to_date=bool(r.flag("up_to_date")))


def of_version(doc: object) -> bool:
    """Whether `doc` is a result this tool reads: an object of this schema version, or of none (written before the
    type); a record entry of another version is not reused (module docstring)."""
    if not isinstance(doc, dict):
        return False
    version = doc.get(VERSION_KEY, RESULT_SCHEMA_VERSION)
    return version == RESULT_SCHEMA_VERSION and not isinstance(version, bool)


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of SmokeResult.to_json()."""
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return loaded
