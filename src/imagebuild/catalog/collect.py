"""One catalog row per tag and alias of a plan, read from the registry (manifests and config blobs through the
registry API, never a layer) and from the local record of the images this host built and tested.

Versions come from the image config's io.imagebuild.* labels, i.e. from what the registry really holds under the
tag; the plan only says which tags to look for (and fills the row of a tag that is not pushed, marked so).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from imagebuild.catalog.records import local_record
from imagebuild.models import Plan
from imagebuild.oci import Reference
from imagebuild.oci.answers import (
    Descriptor,
    ImageConfig,
    ImageManifest,
    image_config,
    image_manifest,
    index_entries,
    is_index,
    parse_object,
)
from imagebuild.oci.registry import RegistryError
from imagebuild.plan.tags import references
from imagebuild.smokeresult import SmokeResult

# catalog column -> image label (labels of images imagebuild builds; an empty value means "not in this image")
VERSION_LABELS = {
    "torch": "io.imagebuild.torch",
    "cuda": "io.imagebuild.cuda",
    "cudnn": "io.imagebuild.cudnn",
    "nccl": "io.imagebuild.nccl",
    "python": "io.imagebuild.python",
    "os": "io.imagebuild.os",
    "transformer_engine": "io.imagebuild.transformer-engine",
    "gpus": "io.imagebuild.gpus",  # target GPUs and their compute capabilities (render/hardware.py)
    "min_driver": "io.imagebuild.min-driver",  # the oldest NVIDIA driver that runs it
}
FLAVOR_LABEL = "io.imagebuild.flavor"
CREATED_LABEL = "org.opencontainers.image.created"
PREFERRED_PLATFORM = ("linux", "amd64")
CONFIG_MAX_BYTES = 4 << 20  # image configs are kilobytes; the catalog never downloads anything big


class RegistryReader(Protocol):
    """What the catalog asks of a registry (`oci.RegistryClient` is one): manifests and small blobs, both checked
    against their digests by the client."""

    def manifest(self, repository: str, reference: str) -> tuple[str, dict[str, object]] | None: ...

    def blob(self, repository: str, digest: str, max_bytes: int = ...) -> bytes: ...


@dataclass(frozen=True)
class Manifest:
    """A manifest or an index as the registry serves it, checked (oci.answers): `digest` is the sha256 of exactly
    the bytes served; `entries` an index's, `image` an image manifest's config and layers."""

    digest: str
    entries: tuple[Descriptor, ...] = ()
    image: ImageManifest | None = None

    @property
    def is_index(self) -> bool:
        return self.image is None

    @property
    def config_digest(self) -> str | None:
        return self.image.config.digest if self.image else None

    @property
    def layers_size(self) -> int:
        """Sum of the layer sizes the manifest declares: the compressed bytes a pull downloads."""
        return self.image.layers_size if self.image else 0


def _manifest(reader: RegistryReader, repository: str, reference: str, what: str) -> Manifest | None:
    got = reader.manifest(repository, reference)
    if got is None:
        return None
    digest, doc = got[0], dict(got[1])
    if is_index(doc):
        return Manifest(digest, entries=tuple(index_entries(doc, what)))
    return Manifest(digest, image=image_manifest(doc, what))


def _config(reader: RegistryReader, repository: str, digest: str, what: str) -> ImageConfig:
    return image_config(parse_object(reader.blob(repository, digest, max_bytes=CONFIG_MAX_BYTES),
                                     f"{what}: image config {digest}"), what)


@dataclass
class Entry:
    """One tag or alias of the plan, as the registry serves it."""

    reference: str  # full reference: registry/repository:tag
    tag: str  # the tag alone
    alias_of: str | None  # for an alias: the full tag of the plan image it belongs to
    flavor: str
    versions: dict[str, str | None]
    pushed: bool
    versions_from: str = "registry"  # "registry" (the config's labels) | "plan" (not pushed: what the plan says)
    digest: str | None = None  # what `docker pull` resolves the tag to (an index digest for multi-platform tags)
    platform: str | None = None  # the platform the sizes are of, for an index
    config_digest: str | None = None  # = the image ID in the engine that built it
    compressed: int | None = None  # sum of the manifest's layer sizes
    uncompressed: int | None = None  # the engine's size of this image, from the local record (None: no record)
    created: str | None = None
    smoke: dict[str, Any] | None = None  # the latest smoke run in the local record: passed/failed/skipped/ran_on/...
    smoke_runs: list[dict[str, Any]] = field(default_factory=list)  # every recorded run of this image, oldest first
    recorded: bool = False  # the local record knows this image (matched on its config digest)
    layer_media_types: list[str] = field(default_factory=list)  # as the manifest names them
    runs_on: str | None = None  # what a runtime needs to pull it, from those media types (runtime_needs)
    notes: list[str] = field(default_factory=list)
    # per platform (issue 40/42): {"config_digest", "coverage": models.kernel_coverage, "audit": audit summary or
    # None}; from the local record matched on each platform image's config digest ("not checked" without one)
    platforms: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def ran_on(where: str | None) -> str:
    """The record's `where` of a smoke run ("cpu", "gpu:<model>[,<model>...]", "gpu") as the catalog says it."""
    if not where:
        return "–"
    if where == "cpu":
        return "CPU host"
    kind, _, models = where.partition(":")
    if kind == "gpu":
        return ", ".join(m for m in models.split(",") if m) if models else "GPU (model not recorded)"
    return where


def smoke_summary(run: SmokeResult) -> dict[str, Any]:
    return {"passed": run.passed, "failed": run.failed, "skipped": run.skipped, "ran_on": ran_on(run.where),
            "tested_at": run.at}


def _platform_child(index: Manifest) -> tuple[Descriptor | None, list[str]]:
    """The index entry whose sizes the row shows (linux/amd64 when present, else the first real platform)."""
    entries = list(index.entries)
    real = [m for m in entries if m.platform.get("os") not in (None, "unknown")]
    names = [m.platform_name for m in real]
    for m in real:
        if (m.platform.get("os"), m.platform.get("architecture")) == PREFERRED_PLATFORM:
            return m, names
    return (real[0] if real else (entries[0] if entries else None)), names


def _image_manifest(reader: RegistryReader, ref: Reference, entry: Entry,
                    others: dict[str, str | None] | None = None) -> Manifest | None:
    """The image manifest whose sizes the row shows; `others` gets every other platform image of an index
    (platform -> config digest, None when the registry lacks its manifest)."""
    manifest = _manifest(reader, ref.repository, ref.tag or "", str(ref))
    if manifest is None:
        return None
    entry.digest = manifest.digest
    if not manifest.is_index:
        return manifest
    child, names = _platform_child(manifest)
    if others is not None:
        for m in manifest.entries:
            if m is child or m.platform.get("os") in (None, "unknown"):
                continue
            other = _manifest(reader, ref.repository, m.digest, f"{ref} ({m.digest})")
            others[m.platform_name] = other.config_digest if other is not None else None
    if child is None:
        entry.notes.append("the index lists no image manifest")
        return None
    entry.platform = child.platform_name if child.platform else None
    if len(names) > 1:
        entry.notes.append(f"multi-platform ({', '.join(names)}); sizes and labels of {entry.platform}")
    manifest = _manifest(reader, ref.repository, child.digest, f"{ref} ({child.digest})")
    if manifest is not None and manifest.is_index:
        raise RegistryError(f"{ref}: the index names {child.digest}, which is another index, not an image")
    if manifest is None:
        entry.notes.append(f"the index names {child.digest}, which the registry does not have")
    return manifest


ZSTD_NEEDS = "zstd layers: Docker ≥ 23, containerd ≥ 1.5, enroot ≥ 3.5"
GZIP_NEEDS = "gzip layers: any runtime"


def runtime_needs(media_types: list[str]) -> str:
    """What a node's runtime must be to pull layers of these media types (zstd came late to the runtimes: Docker 23,
    containerd 1.5, enroot 3.5; Docker 20.10 and older enroot fail on it)."""
    if any(m.endswith("+zstd") for m in media_types):
        return ZSTD_NEEDS
    if all(m.endswith(("gzip", ".tar")) for m in media_types):
        return GZIP_NEEDS
    return "layers of media type " + ", ".join(m for m in media_types if not m.endswith(("gzip", ".tar")))


def _fill_from_registry(entry: Entry, manifest: Manifest, config: ImageConfig, planned: dict[str, str | None],
                        planned_flavor: str) -> None:
    labels = config.labels
    entry.compressed = manifest.layers_size
    entry.layer_media_types = sorted({layer.media_type for layer in manifest.image.layers} if manifest.image else ())
    entry.runs_on = runtime_needs(entry.layer_media_types)
    entry.config_digest = manifest.config_digest
    entry.created = labels.get(CREATED_LABEL) or config.created
    if not any(key in labels for key in (*VERSION_LABELS.values(), FLAVOR_LABEL)):
        entry.notes.append("the image carries no io.imagebuild.* labels (not built by imagebuild?)")
    entry.versions = {col: (labels.get(label) or None) for col, label in VERSION_LABELS.items()}
    entry.flavor = labels.get(FLAVOR_LABEL) or entry.flavor
    # the registry holds another build than the plan describes (a moving alias not pushed again, an old tag)
    differ = [f"{col} {entry.versions[col]} (plan: {planned[col]})" for col in ("torch", "cuda", "python", "os")
              if labels.get(VERSION_LABELS[col]) and planned.get(col) and entry.versions[col] != planned[col]]
    if labels.get(FLAVOR_LABEL) and labels[FLAVOR_LABEL] != planned_flavor:
        differ.append(f"flavor {labels[FLAVOR_LABEL]} (plan: {planned_flavor})")
    if differ:
        entry.notes.append("the registry holds another image than the plan: " + ", ".join(differ))


def _platform_facts(config_digest: str | None, record_path: Path) -> dict[str, Any]:
    """One platform image's GPU coverage and audit from the local record, matched on its config digest."""
    record = local_record(config_digest, record_path) if config_digest else None
    if record is None:
        why = "no local record of this image" if config_digest else "the registry lacks this platform's manifest"
        return {"config_digest": config_digest, "coverage": {"state": "not checked", "why": why}, "audit": None}
    return {"config_digest": config_digest, "coverage": record.coverage(), "audit": record.audit}


def collect(plan: Plan, reader_for: Callable[[str], RegistryReader], record_path: Path) -> list[Entry]:
    """Every reference of every plan image (full tag, then its aliases), in plan order."""
    entries: list[Entry] = []
    for image in plan.images:
        planned = dict(image.variant.versions.as_dict())
        # a not-pushed row shows what the image would carry: its planned labels (a base has no torch), else the pins
        would_carry = ({col: image.labels.get(label) or None for col, label in VERSION_LABELS.items()}
                       if image.labels else {col: planned.get(col) for col in VERSION_LABELS})
        tag_digest: str | None = None  # the full tag's digest, to flag an alias that points elsewhere
        for n, text in enumerate(references(image)):
            ref = Reference.parse(text)
            entry = Entry(reference=text, tag=ref.tag or "", alias_of=image.tag if n else None, flavor=image.flavor,
                          versions=dict(would_carry), pushed=False,
                          versions_from="plan")
            reader = reader_for(ref.registry)
            others: dict[str, str | None] = {}
            manifest = _image_manifest(reader, ref, entry, others)
            if manifest is not None:
                entry.pushed, entry.versions_from = True, "registry"
                config_digest = manifest.config_digest
                config = _config(reader, ref.repository, config_digest, text) if config_digest else \
                    image_config({}, text)
                _fill_from_registry(entry, manifest, config, planned, image.flavor)
                record = local_record(config_digest, record_path) if config_digest else None
                if record is not None:
                    entry.recorded = True
                    entry.uncompressed = record.size
                    latest = record.latest_run
                    entry.smoke = smoke_summary(latest) if latest else None
                    entry.smoke_runs = [smoke_summary(run) for run in record.runs]
                own = entry.platform or image.variant.platform
                entry.platforms = {p: _platform_facts(c, record_path) for p, c in
                                   sorted({own: config_digest, **others}.items())}
            if n == 0:
                tag_digest = entry.digest
            elif entry.digest and tag_digest and entry.digest != tag_digest:
                entry.notes.append(f"points at another image than {image.short_tag}")
            entries.append(entry)
    return entries
