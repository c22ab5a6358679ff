"""What `build` writes about each image's content: a CycloneDX SBOM beside the report (its digest in the report and
the record), and, for a rebuild, the diff against the image the tag pointed at before.

SBOMs are made from the image's own files (inventory.read_local: dpkg database, every Python distribution, labels),
with the wheel hashes of the matrix's lock when it has one. What is read out of an image is derived once per image ID
and kept with the state (record/derived.py): the files its inventory parses (`inventory-files-<key>`) and the SBOM made
of them (`sbom-<key>`, the key: the lock file's digest, SOURCE_DATE_EPOCH, the image's repo digests, this tool's
version). So a no-op build stays a no-op in any report folder: the SBOM the record holds for the same image ID, its
file still there with that digest, is used as it is; else the kept SBOM is copied into the report folder; only an
image never read before (or whose kept copies do not hash right) is read. A rebuild's diff reads the image the tag
named before from its kept files too."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from imagebuild.engine.store import as_store
from imagebuild.files import write_text_atomic
from imagebuild.models import HERE, BuildStatus, ImagePlan, ImageResult, Plan
from imagebuild.phases import Phase
from imagebuild.pipeline.keptfiles import local_inventory
from imagebuild.record.derived import Derived, key_of
from imagebuild.record.store import file_sha256

DIFF_TEXT_MAX = 6000
SBOM_SPEC = "CycloneDX 1.6"
SBOM = "sbom-"  # the kept SBOM's name (record/derived.py): this and a key (keptfiles.FILES: the files')


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


class Sboms:
    """The SBOM text of local images for one run: kept (record/derived.py) or made, then kept; the lock's wheel
    hashes read once, for the first SBOM made."""

    def __init__(self, client: Any, plan: Plan, kept: Derived) -> None:
        self.client, self.plan, self.kept = client, plan, kept
        self._hashes: dict[tuple[str, str], str] | None = None
        # what else goes into an SBOM (the image's repo digests aside): the lock's hashes, the timestamp's override
        self._inputs = (file_sha256(plan.lock_file) if plan.lock_file else None,
                        os.environ.get("SOURCE_DATE_EPOCH", "").strip())

    def text(self, image_id: str) -> str:
        """The SBOM of `image_id` (in this engine); an exception when it can be neither found kept nor made."""
        info = as_store(self.client).inspect(image_id)
        if info is None:
            from imagebuild.inventory import ImageNotFound

            raise ImageNotFound(f"no image {image_id!r} in the local engine")
        name = SBOM + key_of(*self._inputs, sorted(str(d) for d in info.get("RepoDigests") or ()))
        data = self.kept.get(image_id, name)
        if data is not None:
            why = sbom_problem(data, image_id)
            if why is None:
                return data.decode("utf-8")
            self.kept.discard(image_id, name, why)
        from imagebuild.inventory import dump_sbom, make_sbom  # not on a no-op: loads the CycloneDX writer

        if self._hashes is None:
            self._hashes = lock_hashes(self.plan)
        text = dump_sbom(make_sbom(local_inventory(self.client, self.kept, image_id, info), self._hashes))
        self.kept.put(image_id, name, text.encode("utf-8"), kind=SBOM)  # the latest key's only
        return text


def sbom_problem(data: bytes, image_id: str) -> str | None:
    """Why kept bytes are not a CycloneDX SBOM of `image_id` (a file that hashes right may still be planted)."""
    try:
        doc = json.loads(data.decode("utf-8"))
        component = doc["metadata"]["component"]
        if doc.get("bomFormat") != "CycloneDX" or component.get("bom-ref") != image_id:
            return f"not a CycloneDX SBOM of {image_id}"
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        return f"not a CycloneDX SBOM ({type(exc).__name__})"
    return None


def write_sboms(client: Any, plan: Plan, results: list[ImageResult], report_dir: Path, recorded: dict[str, dict[str, Any]],
                kept: Derived, say: Callable[[str], None]) -> None:
    """SBOM per built/up-to-date local image: reports/<matrix>/sbom/<plan id>.cdx.json; fills `row.sbom`.

    `recorded`: plan id -> the record's sbom entry (path, sha256, image_id) from an earlier run; `kept`: the state's
    derived files (the SBOM of an image ID read before is copied from there, not read from the image again)."""
    by_tag = plan.by_tag()
    sboms = Sboms(client, plan, kept)
    folder = Path(report_dir) / "sbom"
    for res in results:
        img: ImagePlan | None = by_tag.get(res.tag)
        if img is None or res.status not in HERE or not res.image_id:
            continue
        if (res.source or "").startswith("registry"):
            continue  # not in this engine: `imagebuild sbom REF` reads it from the registry when wanted
        path = folder / f"{img.id}.cdx.json"
        old = recorded.get(img.id) or {}
        t0 = time.monotonic()
        if old.get("image_id") == res.image_id and path.is_file() and \
                "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest() == old.get("sha256"):
            res.sbom = dict(old)
            res.phases.append(Phase("sbom", "the recorded one, still in place", time.monotonic() - t0, True))
            continue
        try:
            text = sboms.text(res.image_id)
        except Exception as exc:  # the build stands; the report says the SBOM is missing and why
            say(f"warning: {img.tag}: no SBOM ({exc})")
            res.sbom = {"error": str(exc)}
            continue
        finally:  # kept copies (record/derived.py) or the image's files read and made into an SBOM
            res.phases.append(Phase("sbom", "the image's inventory and its CycloneDX document",
                                    time.monotonic() - t0))
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)  # by rename: a link planted at the name is replaced, not written through
        data = text.encode()
        res.sbom = {"path": str(path), "sha256": "sha256:" + hashlib.sha256(data).hexdigest(),
                    "image_id": res.image_id, "components": text.count('"bom-ref"') - 1, "spec": SBOM_SPEC}


def diff_rebuilds(client: Any, plan: Plan, results: list[ImageResult], before: dict[str, str], kept: Derived,
                  say: Callable[[str], None]) -> None:
    """For every image rebuilt onto a tag that pointed at another image: what changed (`row.diff`); each image's
    files from the kept copies when it was read before (the new one: by its SBOM, just now)."""
    for res in results:
        old = before.get(res.tag)
        if res.status != BuildStatus.BUILT or not old or not res.image_id or old == res.image_id:
            continue
        from imagebuild.inventory import diff, diff_to_json, format_diff  # only for a rebuild

        t0 = time.monotonic()
        try:
            d = diff(local_inventory(client, kept, old), local_inventory(client, kept, res.image_id))
        except Exception as exc:  # the previous image may be gone (pruned); say so, keep going
            say(f"warning: {res.tag}: no diff against the previous image {old[7:19]} ({exc})")
            continue
        finally:
            res.phases.append(Phase("diff", f"against the image before ({old[7:19]})", time.monotonic() - t0))
        doc = diff_to_json(d)
        res.diff = {
            "against": old,
            "os": {k: len(doc.get(f"os_{k}") or []) for k in ("added", "removed", "changed")},
            "python": {k: len(doc.get(f"py_{k}") or []) for k in ("added", "removed", "changed")},
            "labels": len(doc.get("labels") or []),
            "text": format_diff(d)[:DIFF_TEXT_MAX],
        }
