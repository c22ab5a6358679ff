"""What this host recorded about an image it built and smoke-tested, found by the image's ID.

The ONE place the catalog reads local records. Today that is `reports/build-report.json` (rows merged by tag, each
with the `image_id` the build or the test saw); the per-matrix state record keyed by image ID will replace it, and
only `local_record` changes then. Matching is on the image ID, which for an image pushed from the classic engine
store is the config digest its registry manifest names: a row of another build under the same tag never matches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LocalRecord:
    """One image as the local record knows it."""

    image_id: str
    size: int | None = None  # uncompressed bytes, as the engine measured the image (None: not recorded)
    tests: dict[str, Any] | None = None  # the smoke runner's result row (ImageResult.tests), None: never tested here
    tag: str | None = None  # the tag the row was recorded under (for messages only, never for matching)


def local_record(image_id: str, path: Path) -> LocalRecord | None:
    """The record of image `image_id` (`sha256:...`, the config digest) in the record file `path`, or None.

    A missing or unreadable file is no record (the catalog then says "no local record"), never an error: a registry's
    catalog may be written on a host that never built the images.
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    rows = doc.get("images") if isinstance(doc, dict) else None
    found = [row for row in (rows if isinstance(rows, list) else [])
             if isinstance(row, dict) and image_id and row.get("image_id") == image_id]
    if not found:
        return None
    # the same image may sit under two tags (an unchanged rebuild): prefer the row that has smoke results
    row = next((r for r in found if isinstance(r.get("tests"), dict)), found[0])
    size, tests = row.get("size"), row.get("tests")
    return LocalRecord(image_id, size if isinstance(size, int) else None, tests if isinstance(tests, dict) else None,
                       row.get("tag"))
