"""After an image is built or found up to date: fill its result row (size, 5 largest layers, the environment's
layers) and tag its aliases.

Best effort: a failure here is a warning, never a failed image; the image itself is fine. An alias the image's
inspect data already lists (RepoTags) is not tagged again: an up-to-date image asks the engine for nothing but its
inspect (the whole-process no-op). Its history (a tenth of a second for an image of a hundred steps) is asked once
per image ID and storage driver and kept with the state (BuildOptions.kept, record/derived.py): only what is read
here, each step's size and what made it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from imagebuild.models import ImageResult
from imagebuild.oci import Reference
from imagebuild.plan.tags import references
from imagebuild.record.derived import key_of
from imagebuild.report.layers import DEFAULT_LAYER_LIMIT, env_layers, limit_problem, over_limit
from imagebuild.secrets import redact

if TYPE_CHECKING:
    from imagebuild.builder.state import RunState

HISTORY = "history-"  # the kept file's name: this and a key of the storage driver (record/derived.py)


def describe(run: RunState, res: ImageResult) -> None:
    """size, 5 largest layers, aliases."""
    img = run.plan.by_tag()[res.tag]
    tagged: set[str] = set()  # the references the engine says name the image already
    try:
        info = run.store.inspect(res.image_id or "")
        if info is None:
            raise LookupError(f"no image {res.image_id} in the engine")
        tagged = {str(t) for t in info.get("RepoTags") or ()}
        hist = history(run, res.image_id or "", info)
        # the unpacked size: the classic store's `Size`; the containerd image store (dockerd 26.1, the BuildKit
        # backend's engine) reports the compressed content there, its history keeps the unpacked layer sizes
        res.size = max(int(info.get("Size") or 0), sum(int(h.get("Size") or 0) for h in hist))
        layers = sorted((h for h in hist if h.get("Size")), key=lambda h: h["Size"], reverse=True)[:5]
        # CreatedBy can carry build-arg values (the `|N ARG=...` prefix): redact before it reaches a report
        res.layers = [{"size": int(h["Size"]), "created_by": redact(h.get("CreatedBy") or "")[:300]}
                      for h in layers]
        res.env_layers = env_layers(hist, img.env_layers)
        limit = img.variant.layer_limit or DEFAULT_LAYER_LIMIT
        for row in over_limit(res.env_layers, limit):  # push refuses it; say so now, after the build
            row["over_limit"] = True
            run.warn(limit_problem(res.tag, row, limit))
    except Exception as exc:
        run.warn(f"{res.tag}: could not read size/history: {exc}")
    if run.options.tag_aliases:
        for alias in references(img)[1:]:
            try:
                ref = Reference.parse(alias)
                if f"{ref.name}:{ref.tag or 'latest'}" in tagged:
                    continue
                run.store.tag(res.image_id or "", ref.name, ref.tag or "latest")
            except Exception as exc:
                run.warn(f"{res.tag}: could not tag alias {alias}: {exc}")


def history(run: RunState, image_id: str, info: dict[str, Any]) -> list[dict[str, Any]]:
    """The image's build steps, newest first, as {"Size", "CreatedBy"}: kept with the state, else asked and kept.
    The sizes are the storage driver's (GraphDriver.Name, part of the key): another engine kind asks again."""
    kept = run.options.kept
    if kept is None:
        return _steps(run.store.history(image_id))
    name = HISTORY + key_of(str((info.get("GraphDriver") or {}).get("Name") or ""))
    data = kept.get(image_id, name)
    if data is not None:
        try:
            return _steps(json.loads(data.decode("utf-8")), strict=True)
        except (ValueError, RecursionError) as exc:
            kept.discard(image_id, name, str(exc) if isinstance(exc, ValueError) else "nested too deeply")
    steps = _steps(run.store.history(image_id))
    kept.put(image_id, name, (json.dumps(steps, separators=(",", ":")) + "\n").encode("utf-8"), kind=HISTORY)
    return steps


def _steps(history: Any, strict: bool = False) -> list[dict[str, Any]]:
    """{"Size": int, "CreatedBy": str (redacted: a build arg's credential never reaches the state)} per step;
    `strict` (a kept file): ValueError for anything else."""
    if strict and not (isinstance(history, list) and all(
            isinstance(h, dict) and set(h) == {"Size", "CreatedBy"} and isinstance(h["CreatedBy"], str)
            and type(h["Size"]) is int for h in history)):
        raise ValueError("not a kept history: a list of {Size, CreatedBy}")
    return [{"Size": int(h.get("Size") or 0), "CreatedBy": redact(str(h.get("CreatedBy") or ""))}
            for h in history or ()]
