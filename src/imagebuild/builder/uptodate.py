"""Is an image already here? The labels that say so, and the one look-up of the local image store that answers it.

An image holds a plan row's inputs when it carries `INPUTS_LABEL == plan.inputs_hash`; it is up to date to build on
when it also stands on the base image ID it would be built on: the inputs hash alone is not enough, since a rebuilt
parent (new ID, same inputs) must make its children stale. `build` writes that ID as `BASE_LABEL`. A `docker buildx
bake` of the export (bake.py) cannot: the parent's ID exists only once bake has built it, so its targets carry an
empty `BASE_LABEL` (unknown, never a guess). Such an image counts as standing on `base_id` only when its own layers
begin with exactly `base_id`'s layers (content-addressed diff IDs: the parent's filesystem, whatever its label says).
That keeps state from lying: a label names an image ID only where the ID was known, and the one claim made without
it is proved by the image's bytes. The other choice, a base label bake can know in advance (the parent's inputs
hash), would say "built on some image with these inputs" where a rebuilt parent with new bytes has the same hash,
and would change what every image built so far carries.

`local_image` is the one answer for every caller (the executor's up-to-date test, the record's `locate`, the disk
estimate); the registry's answer is remote.py's (which keeps the strict `BASE_LABEL` test: it has no layers of a
local parent to compare).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from imagebuild.dates import SOURCE_DATE_LABEL
from imagebuild.engine.store import ImageStore
from imagebuild.models import ImagePlan
from imagebuild.oci import Reference

INPUTS_LABEL = "io.imagebuild.inputs-hash"
BASE_LABEL = "io.imagebuild.base-id"
UNKNOWN_BASE = ""  # BASE_LABEL of a bake export's image: bake alone knows the ID of the parent it built on


def planned_labels(img: ImagePlan, base_id: str, source_date: str) -> dict[str, str]:
    """The labels an image of `img` carries: the plan's, then the up-to-date ones. One home for `build`
    (one_image.build_request) and the bake export (`base_id` UNKNOWN_BASE), so their images carry the same set."""
    return {**img.labels, INPUTS_LABEL: img.inputs_hash, BASE_LABEL: base_id, SOURCE_DATE_LABEL: source_date}


def holds_inputs(labels: Mapping[str, Any] | None, img: ImagePlan, base_id: str | None = None) -> bool:
    """Do these image labels say the image holds `img`'s planned inputs (built on `base_id`, when given)?"""
    labels = labels or {}
    return labels.get(INPUTS_LABEL) == img.inputs_hash and (base_id is None or labels.get(BASE_LABEL) == base_id)


def labels_of(info: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return ((info or {}).get("Config") or {}).get("Labels") or {}


def local_image(store: ImageStore, img: ImagePlan, *, base_id: str | None = None,
                first: Iterable[str | None] = ()) -> tuple[str, str | None] | None:
    """(image ID, the tag it was found under or None) of a local image holding `img`'s inputs (on `base_id` when
    given, see the module doc): the references in `first` (a recorded image ID), then the plan's tag, then any
    *tagged* image carrying the labels. None when the engine has none."""
    for ref in (*first, img.tag):
        if not ref:
            continue
        info = store.inspect(ref)
        if info is not None and _stands_on(store, info, labels_of(info), img, base_id):
            return str(info["Id"]), (ref if ref == img.tag else None)
    for entry in store.find({INPUTS_LABEL: img.inputs_hash}):
        # Builder stages (`FROM ${BASE_IMAGE} AS pip`) inherit the parent's labels, and the build API's labels only
        # reach the final stage: an untagged image carrying these labels may be a child's intermediate stage (seen:
        # a 1.3 GB pip stage matching its 0.2 GB base). Only tagged images are finished imagebuild images.
        tags = [t for t in (entry.get("RepoTags") or []) if t and t != "<none>:<none>"]
        if tags and _stands_on(store, entry, entry.get("Labels"), img, base_id):
            return str(entry["Id"]), None
    return None


def _stands_on(store: ImageStore, info: Mapping[str, Any], labels: Mapping[str, Any] | None, img: ImagePlan,
               base_id: str | None) -> bool:
    """`holds_inputs`, or a bake's image (UNKNOWN_BASE) whose layers begin with `base_id`'s (module doc)."""
    if holds_inputs(labels, img, base_id):
        return True
    if base_id is None or not holds_inputs(labels, img) or (labels or {}).get(BASE_LABEL) != UNKNOWN_BASE:
        return False
    own = layers_of(info if "RootFS" in info else store.inspect(str(info["Id"])))
    base = layers_of(store.inspect(base_id))
    return bool(base) and own[:len(base)] == base


def layers_of(info: Mapping[str, Any] | None) -> list[str]:
    return list(((info or {}).get("RootFS") or {}).get("Layers") or [])


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
