"""Which image `imagebuild run` starts: a reference the engine has, or the plan's image of one flavor of a matrix."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from imagebuild.engine.store import as_store
from imagebuild.errors import UsageError

if TYPE_CHECKING:
    from imagebuild.models import ImagePlan, Plan

FLAVOR_LABEL = "io.imagebuild.flavor"


@dataclass(frozen=True)
class ImageInfo:
    ref: str  # what the user named (tag, reference, ID)
    id: str
    labels: dict[str, str] = field(default_factory=dict)
    user: str = ""  # the image's USER ("1000:1000", "ml", "" = root)

    @property
    def flavor(self) -> str | None:
        return self.labels.get(FLAVOR_LABEL) or None

    def user_uid(self) -> int | None:
        """The image user's numeric UID when the image names it by number (ours: 1000:1000)."""
        uid = self.user.split(":", 1)[0]
        return int(uid) if uid.isdigit() else (0 if not uid else None)


def inspect(client: Any, ref: str) -> ImageInfo:
    """The image as the engine has it; UsageError (one line) when the engine does not have it."""
    info = as_store(client).inspect(ref)
    if info is None:
        raise UsageError(f"image {ref!r} is not in the engine: build it (imagebuild build) or pull it "
                         f"(docker pull {ref})")
    cfg = info.get("Config") or {}
    return ImageInfo(ref=ref, id=info["Id"], labels=dict(cfg.get("Labels") or {}), user=cfg.get("User") or "")


def _matches(img: ImagePlan, pattern: str) -> bool:
    from imagebuild.plan.only import matches  # the one --only matcher

    return matches(img, pattern)


def pick(plan: Plan, flavor: str, only: str | None, matrix: str) -> ImagePlan:
    """The one plan image of `flavor` (narrowed by --only): UsageError listing the choices otherwise."""
    rows = [i for i in plan.images if i.flavor == flavor and (not only or _matches(i, only))]
    if len(rows) == 1:
        return rows[0]
    have = sorted(i.id for i in plan.images if i.flavor == flavor)
    if not rows:
        what = f"--flavor {flavor}" + (f" --only {only!r}" if only else "")
        flavors = sorted({i.flavor for i in plan.images})
        raise UsageError(f"{matrix}: {what} matches no image; "
                         + (f"images of that flavor: {', '.join(have)}" if have else
                            f"valid flavors: {', '.join(flavors)}"))
    raise UsageError(f"{matrix}: --flavor {flavor} matches {len(rows)} images; pick one with --only: "
                     + ", ".join(i.id for i in rows))
