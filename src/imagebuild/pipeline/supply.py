"""What `build` writes about each image's content: a CycloneDX SBOM beside the report (its digest in the report and
the record), and, for a rebuild, the diff against the image the tag pointed at before.

SBOMs are made from the image's own files (inventory.read_local: dpkg database, every Python distribution, labels),
with the wheel hashes of the matrix's lock when it has one. An image whose SBOM the record already holds for the
same image ID (and whose file is still there, with that digest) is not read again: a no-op build stays fast."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from imagebuild.engine.store import as_store
from imagebuild.files import write_text_atomic
from imagebuild.models import ImagePlan, ImageResult, Plan
from imagebuild.pipeline.building import HERE, BuildStatus

DIFF_TEXT_MAX = 6000


def previous_ids(client: Any, images: list[ImagePlan]) -> dict[str, str]:
    """tag -> the image ID each of `images` (the ones this run may build: the selection and the parents it needs)
    points at before the build (what a rebuild is compared with); an image outside them is not built, so it is not
    asked about."""
    out = {}
    store = as_store(client)
    for img in images:
        image_id = store.image_id(img.tag)
        if image_id is not None:  # not there yet: nothing to compare with
            out[img.tag] = image_id
    return out


def lock_hashes(plan: Plan) -> dict[tuple[str, str], str]:
    from imagebuild.lock.model import canonical_name, parse  # read only for an SBOM to make (not on a no-op)

    if not plan.lock_file:
        return {}
    try:
        lock = parse(Path(plan.lock_file).read_text(encoding="utf-8"), plan.lock_file)
    except (OSError, ValueError):
        return {}
    return {(canonical_name(p.name), p.version): p.sha256 for entry in lock.images.values() for p in entry.pip}


def write_sboms(client: Any, plan: Plan, results: list[ImageResult], report_dir: Path, recorded: dict[str, dict[str, Any]],
                say: Callable[[str], None]) -> None:
    """SBOM per built/up-to-date local image: reports/<matrix>/sbom/<plan id>.cdx.json; fills `row.sbom`.

    `recorded`: plan id -> the record's sbom entry (path, sha256, image_id) from an earlier run."""
    by_tag = plan.by_tag()
    hashes: dict[tuple[str, str], str] | None = None  # the lock's, read for the first SBOM made
    folder = Path(report_dir) / "sbom"
    for res in results:
        img: ImagePlan | None = by_tag.get(res.tag)
        if img is None or res.status not in HERE or not res.image_id:
            continue
        if (res.source or "").startswith("registry"):
            continue  # not in this engine: `imagebuild sbom REF` reads it from the registry when wanted
        path = folder / f"{img.id}.cdx.json"
        old = recorded.get(img.id) or {}
        if old.get("image_id") == res.image_id and path.is_file() and \
                "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest() == old.get("sha256"):
            res.sbom = dict(old)
            continue
        # not for a no-op (its SBOMs are recorded): inventory loads the tar and CycloneDX readers
        from imagebuild.inventory import dump_sbom, make_sbom, read_local

        if hashes is None:
            hashes = lock_hashes(plan)
        try:
            inv = read_local(client, res.image_id)
            text = dump_sbom(make_sbom(inv, hashes))
        except Exception as exc:  # the build stands; the report says the SBOM is missing and why
            say(f"warning: {img.tag}: no SBOM ({exc})")
            res.sbom = {"error": str(exc)}
            continue
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)  # by rename: a link planted at the name is replaced, not written through
        data = text.encode()
        res.sbom = {"path": str(path), "sha256": "sha256:" + hashlib.sha256(data).hexdigest(),
                    "image_id": res.image_id, "components": text.count('"bom-ref"') - 1,
                    "spec": "CycloneDX 1.6"}


def diff_rebuilds(client: Any, plan: Plan, results: list[ImageResult], before: dict[str, str],
                  say: Callable[[str], None]) -> None:
    """For every image rebuilt onto a tag that pointed at another image: what changed (`row.diff`)."""
    for res in results:
        old = before.get(res.tag)
        if res.status != BuildStatus.BUILT or not old or not res.image_id or old == res.image_id:
            continue
        from imagebuild.inventory import diff_images, diff_to_json, format_diff  # only for a rebuild

        try:
            d = diff_images(client, old, res.image_id)
        except Exception as exc:  # the previous image may be gone (pruned); say so, keep going
            say(f"warning: {res.tag}: no diff against the previous image {old[7:19]} ({exc})")
            continue
        doc = diff_to_json(d)
        res.diff = {
            "against": old,
            "os": {k: len(doc.get(f"os_{k}") or []) for k in ("added", "removed", "changed")},
            "python": {k: len(doc.get(f"py_{k}") or []) for k in ("added", "removed", "changed")},
            "labels": len(doc.get("labels") or []),
            "text": format_diff(d)[:DIFF_TEXT_MAX],
        }
