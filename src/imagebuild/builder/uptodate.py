"""Is an image already here? The labels that say so, and the one look-up of the local image store that answers it.

An image holds a plan row's inputs when it carries `INPUTS_LABEL == plan.inputs_hash`; it is up to date to build on
when it also stands on the image it would be built on. The inputs hash alone is not enough: a rebuilt parent (same
inputs, other bytes) must make its children stale. How "stands on" is proved depends on what it stands on:

- a CHILD (its parent is a plan image): its own layers begin with exactly the parent's layers (content-addressed
  diff IDs: the parent's filesystem), locally from the engine's RootFS layers and in a registry from the config's
  `rootfs.diff_ids` (remote.py). No label names the parent's ID: `build` and a `docker buildx bake` of the export
  (bake.py) give a child the same labels, and bake knows a parent's ID only once it has built it.
- a ROOT (the base flavor: its parent is the bootstrapped OS image or the registry base) carries that image's ID as
  `BASE_LABEL` (a child's is empty, so it does not inherit the root's): the layers cannot say it, because
  BuildKit's `rewrite-timestamp` re-dates the OS image's own layer in the exported image (another diff ID: measured
  on dockerd 26.1.5), and the export can know the ID (it reads the OS image from the engine, as it reads its date),
  so a bake's root carries the same label.

Images built before carry `BASE_LABEL` on children too (their parent's ID); it is read on roots only, so they stay up
to date where their layers say so.

`local_image` is the one answer for every caller (the executor's up-to-date test, the record's `locate`, the disk
estimate); the registry's answer is remote.py's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from imagebuild.dates import SOURCE_DATE_LABEL
from imagebuild.engine.store import ImageStore
from imagebuild.models import ImagePlan
from imagebuild.oci import Reference

INPUTS_LABEL = "io.imagebuild.inputs-hash"
BASE_LABEL = "io.imagebuild.base-id"  # a root image's OS/registry base image ID (module doc)


def planned_labels(img: ImagePlan, base_id: str, source_date: str) -> dict[str, str]:
    """The labels an image of `img` carries: the plan's, then the up-to-date ones (`base_id`: the image it is built
    on; a label on a root image only). One home for `build` (one_image.build_request) and the bake export, so the
    images of both carry the same set (the same image ID)."""
    # a child's is empty, never inherited: a LABEL passes to every image built FROM it, and the root's OS image ID
    # on a runtime would name an image it is not built on
    labels = {**img.labels, INPUTS_LABEL: img.inputs_hash, BASE_LABEL: base_id if img.parent is None else ""}
    return {**labels, SOURCE_DATE_LABEL: source_date}


def holds_inputs(labels: Mapping[str, Any] | None, img: ImagePlan) -> bool:
    """Do these image labels say the image holds `img`'s planned inputs?"""
    return (labels or {}).get(INPUTS_LABEL) == img.inputs_hash


def stands_on(own: list[str], base: list[str]) -> bool:
    """Do an image's layers (diff IDs, bottom first) begin with exactly its parent's? The one rule of the module doc,
    for the local store (`_stands_on`) and the registry (remote.check_config)."""
    return bool(base) and own[:len(base)] == base


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
    """`holds_inputs`, and (with `base_id`) it stands on `base_id` (module doc): a root by its label, a child by its
    layers."""
    if not holds_inputs(labels, img):
        return False
    if base_id is None:
        return True
    if img.parent is None:
        return (labels or {}).get(BASE_LABEL) == base_id
    own = layers_of(info if "RootFS" in info else store.inspect(str(info["Id"])))
    return stands_on(own, layers_of(store.inspect(base_id)))


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
