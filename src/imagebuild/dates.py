"""An image's source date, read from what the engine or a registry says of it (no engine here: foundation).

The source date is the one date an image's reproducible bytes carry (pip layer file dates, the `created` label,
an exported squashfs's timestamps): an image built by imagebuild records it as `io.imagebuild.source-date-epoch`;
any other image's own `created` is its date. builder/sourcedate.py decides what a new build uses; export reads an
existing image's with `image_source_date`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

SOURCE_DATE_LABEL = "io.imagebuild.source-date-epoch"
_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)$")


def parse_created(text: str | None) -> int | None:
    """Seconds since the epoch of an engine/OCI `created` (fractional seconds dropped), None when unreadable or the
    zero time some tools write ("0001-01-01T00:00:00Z")."""
    m = _RFC3339.match((text or "").strip())
    if not m:
        return None
    zone = "+00:00" if m.group(2) == "Z" else m.group(2)
    epoch = int(datetime.fromisoformat(m.group(1) + zone).timestamp())
    return epoch if epoch > 0 else None


def image_source_date(info: Mapping[str, Any]) -> int:
    """The source date of an image from its inspect data: its source-date label, else its `created`; 0 when
    neither reads."""
    label = str(((info.get("Config") or {}).get("Labels") or {}).get(SOURCE_DATE_LABEL, ""))
    if label.isdigit():
        return int(label)
    return parse_created(info.get("Created")) or 0


def from_environment() -> int | None:
    value = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    return int(value) if value.isdigit() else None


def rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
