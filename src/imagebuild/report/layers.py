"""The runtime environment's layers as built: which history step is which tier, its size, the layer limit.

The render names the tiers (imagebuild.render.tiers); the built image says how large each is. A tier's layer is the
final stage's `COPY --from=tier-<name> /opt/stage/ /`: the classic builder's history writes it `COPY dir:<sum> in /`,
BuildKit's `COPY /opt/stage/ / # buildkit`; the tiers are the last such steps of the image, in the render's order.
A dev image with VS Code has one such layer of its own, its code-server stage's `/out/` copied onto / (the last such
step of the dev image: its one row).
When the count does not match (an image built before tiers), nothing is claimed: no sizes are ever invented.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from imagebuild.units import format_size

DEFAULT_LAYER_LIMIT = 8 * 1024**3  # 8 GiB: GHCR and Harbor refuse layers over 10 GB; Azure ML keeps them under 8 GB
_TIER_COPY = re.compile(r"COPY (?:dir:\S+ in |(?:--link )?(?:--from=\S+ )?/(?:opt/stage|out)/ )/\s*(?:# buildkit)?\s*$")


def is_tier_copy(created_by: str | None) -> bool:
    """A history step that laid down one environment tier (a copy of a builder stage's /opt/stage onto /)."""
    return bool(_TIER_COPY.search((created_by or "").strip()))


def tier_steps(created_by: Sequence[str | None], count: int) -> list[int] | None:
    """Indexes (into `created_by`, oldest first) of the `count` tier steps, in layer order; None when the image does
    not have exactly that many at its top (another layout: say nothing rather than guess)."""
    found = [i for i, step in enumerate(created_by) if is_tier_copy(step)]
    if count == 0 or len(found) < count:
        return None
    return found[-count:]


def env_layers(history: Sequence[Mapping[str, Any]], tiers: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The engine's history (newest first, as the API answers) -> one row per tier: tier, holds, size (bytes), or
    [] when the image's steps do not show the tiers."""
    oldest_first = list(reversed(history))
    steps = tier_steps([h.get("CreatedBy") for h in oldest_first], len(tiers))
    if steps is None:
        return []
    return [{"tier": name, "holds": holds, "size": int(oldest_first[i].get("Size") or 0)}
            for (name, holds), i in zip(tiers, steps, strict=True)]


def planned_layers(tiers: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Rows for an image not built (or not in this engine): what each layer will hold, size None ("not built")."""
    return [{"tier": name, "holds": holds, "size": None} for name, holds in tiers]


def over_limit(layers: Sequence[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """The layers larger than `limit` bytes (none without a limit or a size)."""
    if not limit:
        return []
    return [row for row in layers if row.get("size") is not None and int(row["size"]) > limit]


def limit_problem(image: str, row: Mapping[str, Any], limit: int) -> str:
    """One sentence naming the image, the layer, its size, the limit and what it holds (its packages when known)."""
    packages = row.get("packages") or []
    held = f"packages: {', '.join(packages[:8])}{' …' if len(packages) > 8 else ''}" if packages else row["holds"]
    return (f"{image}: layer {row['tier']!r} is {format_size(row['size'])}, over the layer limit "
            f"{format_size(limit)} ({held}); split it (a tier of its own) or raise layer_limit / --layer-limit")


def format_layers(layers: Sequence[Mapping[str, Any]], limit: int | None = None) -> list[str]:
    """One line per layer: `  1. torch  1.02 GB  torch with triton ...` (`not built` when no size is known)."""
    lines = []
    for n, row in enumerate(layers, 1):
        size = row.get("size")
        shown = "not built" if size is None else format_size(size)
        over = row.get("over_limit") or (limit and size is not None and int(size) > limit)
        flag = "  OVER LIMIT" if over else ""
        lines.append(f"  {n}. {row['tier']:<19} {shown:>10}  {row['holds']}{flag}")
    return lines
