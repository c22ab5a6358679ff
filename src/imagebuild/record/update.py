"""Fold one command's results into the record, and the record's facts back into the report rows.

Kept apart from the store so the rules are in one place: a no-op keeps the build time of the build that made the
image; a failed build of the same inputs keeps the last good image; tags and pushes are kept per repository
(registry + path), so two registries never overwrite or duplicate each other.
"""

from __future__ import annotations

from imagebuild.models import ImagePlan, ImageResult, Plan
from imagebuild.record.audits import audit_summary
from imagebuild.record.store import ImageRecord, Record, now


def _entry(rec: Record, img: ImagePlan, by_tag: dict[str, ImagePlan]) -> ImageRecord:
    entry = rec.images.get(img.id)
    parent = by_tag[img.parent].id if img.parent and img.parent in by_tag else None
    if entry is None or entry.inputs_hash != img.inputs_hash:
        entry = ImageRecord(id=img.id, flavor=img.flavor, inputs_hash=img.inputs_hash, parent=parent,
                            versions=img.variant.versions.as_dict())
        rec.images[img.id] = entry
    return entry


def record_build(rec: Record, plan: Plan, results: list[ImageResult]) -> None:
    """After `build`: what each planned image now is. Also completes the rows (build time of up-to-date images)."""
    by_tag = plan.by_tag()
    for res in results:
        img = by_tag.get(res.tag)
        if img is None or res.status in ("skipped", "planned"):
            continue
        old = rec.images.get(img.id)
        same_image = old is not None and old.inputs_hash == img.inputs_hash and old.image_id == res.image_id
        entry = _entry(rec, img, by_tag)
        if res.status == "built":
            entry.built_at, entry.build_seconds, entry.source = now(), res.build_seconds, "built"
            res.built_at, res.source = entry.built_at, "built"
        elif res.status == "up-to-date":
            if same_image:  # a no-op: the row shows the build that made the image
                res.build_seconds, res.built_at = entry.build_seconds, entry.built_at
            else:
                entry.built_at, entry.build_seconds = None, None
                res.build_seconds = None
            entry.source = res.source or "engine"
        if res.status in ("built", "up-to-date"):
            entry.image_id, entry.error = res.image_id, None
            entry.size = res.size if res.size is not None else entry.size
            entry.layers = res.layers or entry.layers
            entry.env_layers = res.env_layers or entry.env_layers
            entry.te_wheel = res.te_wheel or entry.te_wheel
            if res.sbom and res.sbom.get("sha256"):
                entry.sbom = res.sbom
            entry.tags[img.repository] = [img.tag, *img.aliases]
        else:  # failed / not-built: the last good image of these inputs (if any) stays recorded
            entry.error = res.error
        entry.status = res.status
        entry.log_path = res.log_path or entry.log_path
        res.audit = audit_summary(rec.audits, res.image_id)


def record_push(rec: Record, plan: Plan, results: list[ImageResult], image_ids: dict[str, str]) -> None:
    """After a push: per image and repository, the digest the registry serves for which image ID."""
    by_tag = plan.by_tag()
    for res in results:
        img = by_tag.get(res.tag)
        push = res.push or {}
        if img is None or push.get("status") not in ("pushed", "unchanged"):
            continue
        entry = _entry(rec, img, by_tag)
        entry.pushes[img.repository] = {"status": push.get("status"), "digest": push.get("digest"),
                                        "image_id": image_ids.get(res.tag), "tags": push.get("tags") or [],
                                        "at": now(), "seconds": push.get("seconds"),
                                        "compression": push.get("compression")}
        if push.get("signed"):  # the key (path or KMS URI, never a secret) and the attestations attached
            entry.pushes[img.repository]["signed"] = push["signed"]
        index = push.get("index") or {}
        if index.get("status") in ("pushed", "unchanged"):  # the plain tag names an index of several platforms
            entry.pushes[img.repository]["index"] = {"digest": index.get("digest"), "tags": index.get("tags") or [],
                                                     "platforms": index.get("platforms") or {}}
        entry.tags[img.repository] = [img.tag, *img.aliases]


def fill_row(rec: Record | None, img: ImagePlan, row: ImageResult) -> ImageResult:
    """A row for `test`/`push` reports: the recorded facts of the image with these inputs."""
    entry = rec.images.get(img.id) if rec is not None else None
    if entry is None or entry.inputs_hash != img.inputs_hash:
        return row
    row.status = entry.status if entry.image_id else row.status
    row.image_id = row.image_id or entry.image_id
    row.size, row.layers, row.env_layers = entry.size, entry.layers, entry.env_layers
    row.build_seconds, row.built_at, row.source = entry.build_seconds, entry.built_at, entry.source
    row.te_wheel = entry.te_wheel
    row.sbom = entry.sbom if entry.sbom and entry.sbom.get("image_id") == row.image_id else None
    row.audit = audit_summary(rec.audits if rec is not None else None, row.image_id)
    return row
