"""After an image is built or found up to date: fill its result row (size, 5 largest layers) and tag its aliases.

Best effort: a failure here is a warning, never a failed image; the image itself is fine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imagebuild.models import ImageResult
from imagebuild.secrets import redact

if TYPE_CHECKING:
    from imagebuild.builder.state import RunState


def describe(run: RunState, res: ImageResult) -> None:
    """size, 5 largest layers, aliases."""
    img = run.plan.by_tag()[res.tag]
    try:
        info = run.client.api.inspect_image(res.image_id)
        res.size = int(info.get("Size") or 0)
        hist = run.client.api.history(res.image_id)
        layers = sorted((h for h in hist if h.get("Size")), key=lambda h: h["Size"], reverse=True)[:5]
        # CreatedBy can carry build-arg values (the `|N ARG=...` prefix): redact before it reaches a report
        res.layers = [{"size": int(h["Size"]), "created_by": redact(h.get("CreatedBy") or "")[:300]}
                      for h in layers]
    except Exception as exc:
        run.warn(f"{res.tag}: could not read size/history: {exc}")
    if run.options.tag_aliases:
        for alias in img.aliases:
            # aliases are full references ("repo:2.9-cuda12.8-runtime") or short tags of the image's repository
            repo, tag = alias.rsplit(":", 1) if ":" in alias.rsplit("/", 1)[-1] else (img.repository, alias)
            try:
                run.client.api.tag(res.image_id, repo, tag)
            except Exception as exc:
                run.warn(f"{res.tag}: could not tag alias {alias}: {exc}")
