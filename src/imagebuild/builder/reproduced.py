"""Did a rebuild reproduce the image its tag pointed at? Then keep that one.

The classic builder dates every config it writes (`created`, each history entry), so a rebuild whose layers are
byte-identical to the previous image's still gets a new image ID, and every child, whose inputs include the parent's
ID, would rebuild for nothing. After a build, the new image is compared with the one the tag named before: same
layer diff_ids, same config once the dates are set aside, same history steps; when all match the previous image is
kept (the tag moved back to it, the new one removed) and the run says "reproduced: same content as <id>".

Set aside, and only these: the config's and history's dates; the volatile OCI labels (`created`, `revision`: a build
that asks for the build time, or runs from another commit, still made the same content); the config's `Image` (the
ID of the previous build step, itself dated) and the build container's host name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from imagebuild.engine.store import ImageStore

VOLATILE_LABELS = ("org.opencontainers.image.created", "org.opencontainers.image.revision")
_CONFIG_IGNORED = ("Image", "Hostname", "Domainname")


def _config(info: Mapping[str, Any]) -> dict[str, Any]:
    config = dict(info.get("Config") or {})
    for key in _CONFIG_IGNORED:
        config.pop(key, None)
    config["Labels"] = {k: v for k, v in (config.get("Labels") or {}).items() if k not in VOLATILE_LABELS}
    return config


# `LABEL org.opencontainers.image.created=VALUE` as the classic builder records it: a bare or a quoted value. Every
# step's value is blanked, the parent's too (a kept parent carries the revision it was first built from).
_VOLATILE_STEP = re.compile("(" + "|".join(re.escape(k) for k in VOLATILE_LABELS) + r')=("(?:[^"\\]|\\.)*"|\S*)')


def _steps(history: Sequence[Mapping[str, Any]]) -> list[tuple[str, int]]:
    """History as (created_by, size), the volatile label values blanked (they appear in the LABEL steps)."""
    return [(_VOLATILE_STEP.sub(r"\1=<volatile>", str(entry.get("CreatedBy") or "")), int(entry.get("Size") or 0))
            for entry in history]


def differences(old: Mapping[str, Any], new: Mapping[str, Any], old_history: Sequence[Mapping[str, Any]], new_history: Sequence[Mapping[str, Any]]) -> list[str]:
    """What differs between two images (inspect + history as the engine gives them), dates and volatile labels
    aside; empty when the new one reproduces the old one."""
    out = []
    layers = [(info.get("RootFS") or {}).get("Layers") for info in (old, new)]
    if not layers[0] or layers[0] != layers[1]:  # no layer list: nothing to compare, so not the same
        out.append("layers")
    for key in ("Architecture", "Os", "Variant"):
        if old.get(key) != new.get(key):
            out.append(key.lower())
    a, b = _config(old), _config(new)
    out += [f"config {k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    if _steps(old_history) != _steps(new_history):
        out.append("history")
    return out


def same_content(store: ImageStore, old_id: str, new_id: str) -> bool:
    """Whether image `new_id` reproduces `old_id` (see `differences`); False when either is gone."""
    old, new = store.inspect(old_id), store.inspect(new_id)
    if old is None or new is None:
        return False
    return not differences(old, new, store.history(old_id), store.history(new_id))
