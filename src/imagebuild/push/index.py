"""One tag, several platforms: an OCI image index over the platform images push wrote by digest (issue 27).

An image planned for several platforms (the matrix's `platforms:`) is one ImagePlan per platform: the default
platform's under the plain tag, another's with its architecture before the flavor (`…-debian12-arm64-base`). Each is
written by digest (and signed) as any image is; the default platform's image moves no tag of its own. Then one index
naming every platform's manifest (digest, size, media type, os/architecture) is written by digest, the registry must
serve it, it is signed when the run signs, and only then do the plain tag and its aliases move to it, so a node of
either architecture pulls the same tag and gets its own image. The other platforms' own tags (`…-arm64-…`) name their
platform image, for a node that asks for exactly that one.

Nothing is half-published: a platform image that failed or was not pushed, a member the registry does not serve, or a
registry that refuses the index (an OCI index media type it does not take) fails the index in one line and moves no
tag; the tags keep naming what they named before.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from imagebuild.models import DEFAULT_PLATFORM, ImagePlan
from imagebuild.oci.answers import INDEX_TYPES
from imagebuild.plan.tags import index_references

INDEX_MEDIA_TYPE = INDEX_TYPES[0]  # the OCI image index (push writes no Docker manifest list)


@dataclass(frozen=True)
class Member:
    """One platform's manifest in an index, as push wrote it."""

    platform: str  # os/architecture[/variant]
    digest: str
    size: int  # the manifest's length in bytes
    media_type: str
    here: bool = True  # pushed (and signed, when the run signs) in this run; False: found in the registry


@dataclass(frozen=True)
class IndexGroup:
    """The images (one per platform) published under one index's references."""

    refs: tuple[str, ...]  # the plain tag, then the aliases
    images: tuple[ImagePlan, ...]  # default platform first, then by platform name

    @property
    def carrier(self) -> ImagePlan:
        """The image whose result carries the index's push record (the default platform's, else the first)."""
        return self.images[0]


def index_groups(images: list[ImagePlan]) -> list[IndexGroup]:
    """The indexes `images` publish: one per (variant, flavor) with an image of another platform than the default.
    A plan of the default platform only publishes none (its images keep their own tags, as before platforms)."""
    by_refs: dict[tuple[str, ...], list[ImagePlan]] = {}
    for image in images:
        by_refs.setdefault(tuple(index_references(image)), []).append(image)
    groups = []
    for refs, members in by_refs.items():
        if all(m.variant.platform == DEFAULT_PLATFORM for m in members):
            continue
        members.sort(key=lambda m: (m.variant.platform != DEFAULT_PLATFORM, m.variant.platform))
        groups.append(IndexGroup(refs, tuple(members)))
    return groups


def held_tags(groups: list[IndexGroup]) -> set[str]:
    """The images whose own references the index takes over: the default platform's image of each group."""
    return {m.tag for g in groups for m in g.images if m.variant.platform == DEFAULT_PLATFORM}


def platform_descriptor(platform: str) -> dict[str, str]:
    """`linux/arm64/v8` -> {"os": "linux", "architecture": "arm64", "variant": "v8"} (OCI image-index platform)."""
    parts = platform.split("/")
    out = {"architecture": parts[1] if len(parts) > 1 else parts[0], "os": parts[0] if len(parts) > 1 else "linux"}
    if len(parts) > 2:
        out["variant"] = parts[2]
    return out


def index_document(members: list[Member]) -> bytes:
    """The index's exact bytes (compact JSON, members in the given order): the same members give the same digest."""
    doc = {"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE,
           "manifests": [{"mediaType": m.media_type, "digest": m.digest, "size": m.size,
                          "platform": platform_descriptor(m.platform)} for m in members]}
    return json.dumps(doc, separators=(",", ":")).encode()


def index_digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()
