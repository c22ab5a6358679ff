"""Is an image already here? The labels that say so, and the one look-up of the local image store that answers it.

An image holds a plan row's inputs when it carries `INPUTS_LABEL == plan.inputs_hash`; it is up to date to build on
when it also carries `BASE_LABEL == the base image ID it would be built on`: the inputs hash alone is not enough,
since a rebuilt parent (new ID, same inputs) must make its children stale. `local_image` is the one answer for every
caller (the executor's up-to-date test, the record's `locate`, the disk estimate); the registry's answer is
remote.py's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from imagebuild.engine.store import ImageStore
from imagebuild.models import ImagePlan
from imagebuild.oci import Reference

INPUTS_LABEL = "io.imagebuild.inputs-hash"
BASE_LABEL = "io.imagebuild.base-id"


def holds_inputs(labels: Mapping[str, Any] | None, img: ImagePlan, base_id: str | None = None) -> bool:
    """Do these image labels say the image holds `img`'s planned inputs (built on `base_id`, when given)?"""
    labels = labels or {}
    return labels.get(INPUTS_LABEL) == img.inputs_hash and (base_id is None or labels.get(BASE_LABEL) == base_id)


def labels_of(info: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return ((info or {}).get("Config") or {}).get("Labels") or {}


def local_image(store: ImageStore, img: ImagePlan, *, base_id: str | None = None,
                first: Iterable[str | None] = ()) -> tuple[str, str | None] | None:
    """(image ID, the tag it was found under or None) of a local image holding `img`'s inputs (on `base_id` when
    given): the references in `first` (a recorded image ID), then the plan's tag, then any *tagged* image carrying
    the labels. None when the engine has none."""
    for ref in (*first, img.tag):
        if not ref:
            continue
        info = store.inspect(ref)
        if info is not None and holds_inputs(labels_of(info), img, base_id):
            return str(info["Id"]), (ref if ref == img.tag else None)
    wanted = {INPUTS_LABEL: img.inputs_hash, **({BASE_LABEL: base_id} if base_id is not None else {})}
    for entry in store.find(wanted):
        # Builder stages (`FROM ${BASE_IMAGE} AS pip`) inherit the parent's labels, and the build API's labels only
        # reach the final stage: an untagged image carrying these labels may be a child's intermediate stage (seen:
        # a 1.3 GB pip stage matching its 0.2 GB base). Only tagged images are finished imagebuild images.
        tags = [t for t in (entry.get("RepoTags") or []) if t and t != "<none>:<none>"]
        if tags and holds_inputs(entry.get("Labels"), img, base_id):
            return str(entry["Id"]), None
    return None


def find_up_to_date(store: ImageStore, img: ImagePlan, base_id: str) -> str | None:
    """The ID of an existing image with img's inputs on base_id (its tag now points at it), else None."""
    found = local_image(store, img, base_id=base_id)
    if found is None:
        return None
    image_id, under_tag = found
    if under_tag is None:  # the same inputs under another tag (an identical plan entry, a renamed repository)
        ref = Reference.parse(img.tag)
        store.tag(image_id, ref.name, ref.tag or "latest")
    return image_id
