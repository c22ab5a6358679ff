"""The environment layers of planned images as the engine holds them: `plan`'s layer table and push's layer limit.

Sizes come only from the built image (its history in this engine); an image the record does not hold for these
inputs, or the engine does not have, is shown "not built": no size is ever guessed. Push refuses, before anything is
pushed, an image with a layer over the limit (`--layer-limit`, else the matrix's `layer_limit`, else 8 GiB: GHCR and
Harbor refuse layers over 10 GB), in one line naming the image, the layer, its size and the packages it holds.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from typing import Any

from imagebuild.engine.store import ImageStore
from imagebuild.errors import ImagebuildError
from imagebuild.models import ImagePlan
from imagebuild.pipeline.located import Located
from imagebuild.render.tiers import LIST_DIR
from imagebuild.report.layers import (
    DEFAULT_LAYER_LIMIT,
    env_layers,
    limit_problem,
    over_limit,
    planned_layers,
)


class LayerLimitError(ImagebuildError):
    """An image with a layer over the limit: nothing is pushed (exit 1)."""


def layer_limit(img: ImagePlan, override: int | None) -> int:
    return override or img.variant.layer_limit or DEFAULT_LAYER_LIMIT


def built_layers(store: ImageStore | None, img: ImagePlan, image_id: str | None) -> list[dict[str, Any]]:
    """The image's environment layers with their sizes from this engine; planned rows (size None) when the image
    is not here or its steps do not show the tiers."""
    if not img.env_layers:
        return []
    if image_id and store is not None:
        try:
            rows = env_layers(store.history(image_id), img.env_layers)
        except Exception:  # not in this engine (removed, another engine): say "not built", never a guess
            rows = []
        if rows:
            return rows
    return planned_layers(img.env_layers)


def plan_layers(images: Sequence[ImagePlan], image_ids: dict[str, str | None]) -> dict[str, list[dict[str, Any]]]:
    """plan id -> its environment layers, sized from this engine for the images the record holds for these inputs
    (`image_ids`); no engine, or one without the image: "not built" (size None)."""
    store: ImageStore | None = None
    if any(image_ids.get(img.id) for img in images if img.env_layers):
        try:
            from imagebuild.engine import connect
            from imagebuild.engine.store import as_store

            store = as_store(connect("inspect"))
        except Exception:  # no engine here: the record alone never gives a size
            store = None
    return {img.id: built_layers(store, img, image_ids.get(img.id)) for img in images if img.env_layers}


def tier_packages(store: ImageStore, image_id: str, tier: str) -> list[str]:
    """What a tier's layer holds (`name==version`, its own list file in the image); [] when it cannot be read."""
    try:
        raw = store.copy_out(image_id, f"{LIST_DIR}/{tier}.txt")
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            member = tar.next()
            f = tar.extractfile(member) if member is not None else None
            text = f.read().decode("utf-8", "replace") if f is not None else ""
    except Exception:
        return []
    return [line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith("#")]


def check_layer_limits(store: ImageStore, images: Sequence[tuple[ImagePlan, Located]],
                       override: int | None) -> None:
    """Before any push: LayerLimitError naming the first image with a layer over its limit."""
    for img, here in images:
        if not here.image_id or not img.env_layers:
            continue
        limit = layer_limit(img, override)
        for row in over_limit(built_layers(store, img, here.image_id), limit):
            packages = tier_packages(store, here.image_id, str(row["tier"]))
            raise LayerLimitError(limit_problem(img.tag, {**row, "packages": packages}, limit) +
                                  "; nothing was pushed")
