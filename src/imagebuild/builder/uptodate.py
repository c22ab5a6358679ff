"""Is an image already built? The labels that say so, and the look-up that (re)points the tag at a match.

An image is up to date when one carrying `INPUTS_LABEL == plan.inputs_hash` *and* `BASE_LABEL == the base image ID
it would be built on` exists: the inputs hash alone is not enough, since a rebuilt parent (new ID, same inputs)
must make its children stale.
"""

from __future__ import annotations

from imagebuild.models import ImagePlan
from imagebuild.oci import Reference

INPUTS_LABEL = "io.imagebuild.inputs-hash"
BASE_LABEL = "io.imagebuild.base-id"


def find_up_to_date(client, img: ImagePlan, base_id: str) -> str | None:
    """The ID of an existing image with img's inputs on base_id (its tag now points at it), else None."""
    import docker

    def ok(labels: dict | None) -> bool:
        labels = labels or {}
        return labels.get(INPUTS_LABEL) == img.inputs_hash and labels.get(BASE_LABEL) == base_id

    try:
        info = client.api.inspect_image(img.tag)
        if ok((info.get("Config") or {}).get("Labels")):
            return info["Id"]
    except docker.errors.ImageNotFound:
        pass
    # the same inputs may exist under another tag (an identical plan entry, a renamed repository): reuse it
    found = client.api.images(filters={"label": [f"{INPUTS_LABEL}={img.inputs_hash}",
                                                 f"{BASE_LABEL}={base_id}"]})
    for entry in found:
        # Builder stages (`FROM ${BASE_IMAGE} AS pip`) inherit the parent's labels, and the build API's labels only
        # reach the final stage: an untagged image carrying these labels may be a child's intermediate stage (seen:
        # a 1.3 GB pip stage matching its 0.2 GB base). Only tagged images are finished imagebuild images.
        tags = [t for t in (entry.get("RepoTags") or []) if t and t != "<none>:<none>"]
        if tags and ok(entry.get("Labels")):
            ref = Reference.parse(img.tag)
            client.api.tag(entry["Id"], ref.name, ref.tag)
            return entry["Id"]
    return None
