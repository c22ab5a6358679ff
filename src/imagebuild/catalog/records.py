"""What this host recorded about an image it built and smoke-tested, found by the image's ID.

The ONE place the catalog reads local records: the matrix's record `.imagebuild/<matrix>.state.json` (imagebuild.record),
whose image entries carry the image ID each build made (and the engine's size of it) and whose smoke results are keyed
by content (image ID + suite + expectations + where it ran). Matching is on the image ID, which for an image pushed
from the classic engine store is the config digest its registry manifest names: an entry of another build under the
same tag never matches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagebuild.files import FileProblem, read_bounded_text
from imagebuild.models import kernel_coverage
from imagebuild.record.audits import audit_summary
from imagebuild.record.store import SCHEMA
from imagebuild.smokeresult import SmokeResult, SmokeResultError, of_version


@dataclass(frozen=True)
class LocalRecord:
    """One image as the local record knows it."""

    image_id: str
    size: int | None = None  # unpacked bytes, as the engine measured the image (None: not recorded)
    built_at: str | None = None
    runs: list[SmokeResult] = field(default_factory=list)  # smoke results of this image, oldest first
    audit: dict[str, Any] | None = None  # the record's audit of exactly this image ID (record/audits.audit_summary)

    @property
    def latest_run(self) -> SmokeResult | None:
        return self.runs[-1] if self.runs else None

    def coverage(self) -> dict[str, Any]:
        """The target GPUs as the latest smoke run of this image found them (models.kernel_coverage)."""
        run = self.latest_run
        return kernel_coverage(run.to_json() if run is not None else None, self.image_id)


def local_record(image_id: str, path: Path) -> LocalRecord | None:
    """The record of image `image_id` (`sha256:...`, the config digest) in the record file `path`, or None.

    A missing or unreadable file, or one of another record schema, is no record (the catalog then says so), never an
    error: a registry's catalog may be written on a host that never built the images.
    """
    try:
        doc = json.loads(read_bounded_text(path, "record"))
    except (FileProblem, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not image_id:
        return None
    if not isinstance(doc.get("images") or {}, dict) or not isinstance(doc.get("tests") or {}, dict):
        return None  # valid JSON of another shape: no record
    images = [i for i in (doc.get("images") or {}).values() if isinstance(i, dict) and i.get("image_id") == image_id]
    runs = [r for r in (_run(t) for t in (doc.get("tests") or {}).values()) if r is not None and r.image_id == image_id]
    kept = doc.get("audits")
    audits: dict[str, Any] = kept if isinstance(kept, dict) else {}
    audit = audit_summary(audits, image_id) if not _audit_damaged(audits, image_id) else None
    if not images and not runs and audit is None:
        return None
    size = next((i["size"] for i in images if isinstance(i.get("size"), int)), None)
    built_at = next((i["built_at"] for i in images if i.get("built_at")), None)
    return LocalRecord(image_id, size, built_at, sorted(runs, key=lambda t: t.at or ""), audit)


def _run(entry: object) -> SmokeResult | None:
    """A record's test entry as a smokeresult.SmokeResult; one of another schema version (a newer imagebuild's)
    or a damaged one is no run: the catalog says the image was not tested rather than guess at it."""
    if not of_version(entry):
        return None
    try:
        return SmokeResult.from_json(entry, "record")
    except SmokeResultError:
        return None


def _audit_damaged(audits: dict[str, Any], image_id: str) -> bool:
    """A damaged audit entry of this image is no audit (the catalog says "not checked"), never a traceback."""
    from imagebuild.record.audits import audits_problem

    return image_id in audits and audits_problem({image_id: audits[image_id]}) is not None
