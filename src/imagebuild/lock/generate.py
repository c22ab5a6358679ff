"""Make the lock of a plan: every image's pip closure (on top of its parent's pins), apt versions and base state.

Works from the plan the build would run (models.Plan): each image's rendered pip requirements and apt packages, its
pip index build args and wheelhouse. The base's apt sources and the registry digests come from the caller
(commands/lock.py asks builder.bootstrap and oci), so this layer needs neither an engine nor the builder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from imagebuild.lock.apt import AptIndex
from imagebuild.lock.model import BaseLock, Lock, LockedImage, PipPin
from imagebuild.lock.pip import PipResolver, PipSource, platform_tags
from imagebuild.models import ImagePlan, Plan, ResolvedVariant
from imagebuild.secrets import redact

# variant -> (apt source lines `deb URL SUITE COMPONENTS...`, the packages a bootstrap rootfs is made with)
SourcesFor = Callable[[ResolvedVariant], tuple[list[str], tuple[str, ...]]]


@dataclass
class Locker:
    sources_for: SourcesFor
    registry_digest: Callable[[str], str | None] = lambda ref: None
    ca_files: tuple[str, ...] = ()  # --ca-cert files (the variant's own come from the matrix)
    pip: PipResolver = field(default_factory=PipResolver)
    apt: AptIndex = field(default_factory=AptIndex)
    log: Callable[[str], None] = lambda msg: None

    def pip_source(self, image: ImagePlan) -> PipSource:
        args = {**image.build_args, **image.secret_build_args}
        wheelhouse = image.context_dirs.get("wheelhouse")
        return PipSource(index_url=args.get("PIP_INDEX_URL") or None,
                         extra_index_urls=tuple((args.get("PIP_EXTRA_INDEX_URL") or "").split()),
                         find_links=(str(Path(wheelhouse).resolve()),) if wheelhouse else (),
                         ca_files=tuple(dict.fromkeys((*image.variant.ca_certs, *self.ca_files))))

    def image(self, image: ImagePlan, inherited: dict[str, PipPin]) -> LockedImage:
        v = image.variant
        platforms = platform_tags(v.os.glibc)
        pins: tuple[PipPin, ...] = ()
        if image.pip_requirements:
            self.log(f"pip  {image.id}: {' '.join(image.pip_requirements)}")
            closure = self.pip.resolve(list(image.pip_requirements), python=v.versions.python, platforms=platforms,
                                       source=self.pip_source(image),
                                       constraints=[p.requirement() for p in inherited.values()],
                                       what=f"image {image.id}")
            pins = tuple(p for p in closure if inherited.get(p.name) != p)  # what this image's stage installs
        lines, bootstrap_packages = self.sources_for(v)
        apt = self.apt.versions(lines, list(image.apt_packages), what=f"image {image.id}") \
            if image.apt_packages else {}
        base = self.base(v, lines, bootstrap_packages) if image.parent is None else None
        return LockedImage(id=image.id, os=v.versions.os, python=v.versions.python, platform=platforms[0],
                           pip_requires=tuple(sorted(image.pip_requirements)), pip=pins, apt=apt, base=base)

    def base(self, v: ResolvedVariant, lines: list[str], bootstrap_packages: tuple[str, ...]) -> BaseLock:
        if v.base.kind == "registry":
            ref = v.base.ref or ""
            return BaseLock(kind="registry", ref=ref, digest=self.registry_digest(ref))
        return BaseLock(kind="bootstrap", suite=v.os.codename, mirror=redact(v.base.mirror or v.os.mirror),
                        snapshot=v.base.snapshot, extra_packages=tuple(sorted(v.base.packages)),
                        mirror_state=self.apt.mirror_state(lines),
                        packages=self.apt.versions(lines, list(bootstrap_packages), what=f"{v.os.id} bootstrap"))

    def lock(self, plan: Plan, matrix_name: str, made_with: str = "") -> Lock:
        by_tag = plan.by_tag()
        images: dict[str, LockedImage] = {}
        cumulative: dict[str, dict[str, PipPin]] = {}  # image tag -> every pin installed up to that image
        for image in plan.images:  # parents first
            inherited = dict(cumulative.get(image.parent, {})) if image.parent else {}
            locked = self.image(image, inherited)
            images[image.id] = locked
            cumulative[image.tag] = {**inherited, **{p.name: p for p in locked.pip}}
            assert image.parent is None or image.parent in by_tag
        return Lock(matrix=matrix_name, images=images, made_with=made_with)
