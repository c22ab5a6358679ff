"""The source date of an image: SOURCE_DATE_EPOCH for its pip layers' file dates and its `created` label.

Never the build time, so the same inputs give the same bytes: the caller's SOURCE_DATE_EPOCH when set (the
reproducible-builds convention), else what the image is built on says. A parent built by imagebuild carries
`io.imagebuild.source-date-epoch`; an OS image has none, and its own `created` is the date: a bootstrap image's is
the SOURCE_DATE_EPOCH of its root filesystem (snapshot or mirror date, see bootstrap.py), a registry base's is fixed
by its digest. So a whole chain base -> runtime -> dev shares its OS sources' date.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone

from imagebuild.engine.store import ImageStore

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


def from_environment() -> int | None:
    value = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    return int(value) if value.isdigit() else None


def source_date_epoch(store: ImageStore, base_id: str) -> int:
    """The source date for an image built on `base_id` (see the module doc); 0 when nothing says one (a base the
    engine cannot show fails its build anyway, with a clearer message than this look-up would give)."""
    env = from_environment()
    if env is not None:
        return env
    try:
        info = store.inspect(base_id)
    except Exception:
        return 0
    if info is None:
        return 0
    label = ((info.get("Config") or {}).get("Labels") or {}).get(SOURCE_DATE_LABEL, "")
    if str(label).isdigit():
        return int(label)
    return parse_created(info.get("Created")) or 0


def rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
