"""The SLSA v1 provenance predicate of one pushed image, made from the record (docs/RECORD.md) and the lock.

cosign wraps it in an in-toto statement whose subject is the pushed digest (`cosign attest --type slsaprovenance1`),
so a security team reads who built the image from what with `cosign verify-attestation`:

- buildDefinition.externalParameters: the matrix file and its sha256, the image (plan id, tag, flavor), the build
  inputs as the record holds them (BuildInputs.public(): credentials already masked; each value masked again here) and
  the registry;
- internalParameters: the inputs hash (the image's own label) and the versions the image was resolved to;
- resolvedDependencies: the matrix and lock files with their sha256; the parent image by the digest it was pushed
  as (else its image ID) or, for a base image, the OS image (a registry reference with the lock's digest, or the
  bootstrap's mirror and suite); every pip file this image and its parents install, with the sha256 the lock pins;
- runDetails: imagebuild's version as the builder, when the image was built, the SBOM attested beside it.

Pure: the same record, lock and digest give the same predicate (no clock, no engine), so tests pin its values.
Built from masked values (`secrets.mask_tree` on each part as it is assembled: string values only, hashes kept whole)
and never rewritten afterwards: what cosign signs is exactly the structure made here.
"""

from __future__ import annotations

from typing import Any

from imagebuild import __version__
from imagebuild.lock.model import Lock, LockedImage
from imagebuild.models import ImagePlan, Plan
from imagebuild.record.store import ImageRecord, Record
from imagebuild.secrets import mask_tree, redact, redact_host

BUILD_TYPE = "https://imagebuild.dev/slsa/container-image/v1"  # names the shape of externalParameters below
BUILDER_ID = "https://imagebuild.dev/builder"


def _hex(digest: str | None) -> dict[str, str]:
    """{"sha256": hex} of a `sha256:…` digest (the ResourceDescriptor form); {} for none."""
    if not digest or not digest.startswith("sha256:"):
        return {}
    return {"sha256": digest.removeprefix("sha256:")}


def _file(name: str, path: str, digest: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "uri": redact(f"file:{path}")}
    if _hex(digest):
        out["digest"] = _hex(digest)
    return out


def _chain(plan: Plan, image: ImagePlan) -> list[ImagePlan]:
    """`image` and its parents, the image first."""
    by_tag, out = plan.by_tag(), [image]
    while out[-1].parent and out[-1].parent in by_tag and len(out) <= len(by_tag):
        out.append(by_tag[out[-1].parent])
    return out


def _pip_files(lock: Lock | None, chain: list[ImagePlan]) -> list[dict[str, Any]]:
    seen: set[tuple[str, str]] = set()
    out: list[dict[str, Any]] = []
    for img in chain:
        entry: LockedImage | None = lock.images.get(img.id) if lock is not None else None
        for pin in entry.pip if entry is not None else ():
            if (pin.name, pin.version) in seen:
                continue
            seen.add((pin.name, pin.version))
            dep: dict[str, Any] = {"name": redact(pin.file), "uri": redact(f"pkg:pypi/{pin.name}@{pin.version}")}
            if pin.sha256:
                dep["digest"] = {"sha256": pin.sha256.removeprefix("sha256:")}
            out.append(dep)
    return sorted(out, key=lambda d: (d["uri"], d["name"]))


def _parent(plan: Plan, image: ImagePlan, record: Record | None) -> dict[str, Any] | None:
    parent = plan.by_tag().get(image.parent or "")
    if parent is None:
        return None
    entry: ImageRecord | None = record.image(parent.id) if record is not None else None
    push = (entry.pushes.get(parent.repository) or {}) if entry is not None else {}
    pushed = push.get("digest") if push.get("image_id") in (None, entry.image_id if entry else None) else None
    dep: dict[str, Any] = {"name": "parent", "uri": redact(f"oci://{parent.repository}@{pushed}" if pushed
                                                          else f"oci://{parent.tag}")}
    if _hex(pushed):
        dep["digest"] = _hex(pushed)
    annotations = {"plan_id": parent.id, "image_id": entry.image_id if entry is not None else None}
    dep["annotations"] = mask_tree({k: v for k, v in annotations.items() if v})
    return dep


def _os_image(image: ImagePlan, lock: Lock | None) -> dict[str, Any]:
    base = image.variant.base
    locked = lock.images.get(image.id) if lock is not None else None
    base_lock = locked.base if locked is not None else None
    if base.kind == "registry":
        ref = base.ref or ""
        digest = (base_lock.digest if base_lock is not None else None) or (ref.split("@", 1)[1] if "@" in ref else None)
        dep: dict[str, Any] = {"name": "base-image", "uri": redact(f"oci://{ref}")}
        if _hex(digest):
            dep["digest"] = _hex(digest)
        return dep
    osinfo = image.variant.os
    mirror = redact(base.mirror or osinfo.mirror)
    annotations: dict[str, Any] = {"suite": osinfo.codename, "mirror": mirror}
    if base.snapshot:
        annotations["snapshot"] = base.snapshot
    if base_lock is not None and base_lock.mirror_state:
        annotations["mirror_state"] = dict(sorted(base_lock.mirror_state.items()))
    if base.packages:
        annotations["packages"] = list(base.packages)
    return {"name": "base-image", "uri": redact(f"bootstrap:{mirror}?suite={osinfo.codename}"),
            "annotations": mask_tree(annotations)}


def make_provenance(plan: Plan, image: ImagePlan, record: Record | None, lock: Lock | None, digest: str,
                    sbom_sha256: str | None = None, lock_sha256: str | None = None) -> dict[str, Any]:
    """The SLSA v1 predicate (https://slsa.dev/provenance/v1) for `image` pushed as `digest`."""
    entry = record.image(image.id) if record is not None else None
    matrix_path = record.matrix if record is not None else plan.matrix_file
    external: dict[str, Any] = {
        "matrix": {"path": matrix_path, "digest": _hex(record.matrix_digest if record is not None else None)},
        "image": {"id": image.id, "tag": image.tag, "flavor": image.flavor, "aliases": list(image.aliases)},
        "inputs": dict(record.inputs) if record is not None else {},
        "registry": redact_host(record.registry) if record is not None and record.registry else None,
    }
    internal: dict[str, Any] = {
        "inputsHash": image.inputs_hash,
        "versions": image.variant.versions.as_dict(),
        "locked": image.locked,
    }
    deps: list[dict[str, Any]] = [_file("matrix", matrix_path, record.matrix_digest if record is not None else None)]
    if plan.lock_file:
        deps.append(_file("lock", plan.lock_file, lock_sha256))
    parent = _parent(plan, image, record)
    deps.append(parent if parent is not None else _os_image(image, lock))
    deps += _pip_files(lock, _chain(plan, image))
    metadata: dict[str, Any] = {"invocationId": f"{image.id}@{digest}"}
    if entry is not None and entry.built_at:
        metadata["finishedOn"] = entry.built_at
    byproducts: list[dict[str, Any]] = []
    if entry is not None and entry.image_id:
        byproducts.append({"name": "image-config", "digest": _hex(entry.image_id)})
    if _hex(sbom_sha256):
        byproducts.append({"name": "sbom", "digest": _hex(sbom_sha256), "mediaType": "application/vnd.cyclonedx+json"})
    # every variable part from masked values (the record's inputs are masked when written; once more here, value by
    # value, so no path of this module carries a credential), the fixed words and the hashes as they are; the
    # statement is not touched again once assembled
    return {
        "buildDefinition": {"buildType": BUILD_TYPE, "externalParameters": mask_tree(external),
                            "internalParameters": mask_tree(internal), "resolvedDependencies": deps},
        "runDetails": {"builder": {"id": BUILDER_ID, "version": {"imagebuild": __version__}},
                       "metadata": mask_tree(metadata), "byproducts": byproducts},
    }
