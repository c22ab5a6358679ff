"""The source date of an image: SOURCE_DATE_EPOCH for its pip layers' file dates and its `created` label.

Never the build time, so the same inputs give the same bytes: the caller's SOURCE_DATE_EPOCH when set (the
reproducible-builds convention), else what the image is built on says. A parent built by imagebuild carries
`io.imagebuild.source-date-epoch`; an OS image has none, and its own `created` is the date: a bootstrap image's is
the SOURCE_DATE_EPOCH of its root filesystem (snapshot or mirror date, see bootstrap.py), a registry base's is fixed
by its digest. So a whole chain base -> runtime -> dev shares its OS sources' date.
"""

from __future__ import annotations

from imagebuild.dates import from_environment, image_source_date
from imagebuild.engine.store import ImageStore


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
    return 0 if info is None else image_source_date(info)
