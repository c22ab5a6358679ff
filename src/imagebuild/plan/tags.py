"""Tag scheme.

Full tag (unique, readable):
  <registry>/<name>:<torch>-cuda<cuda>-cudnn<major>-py<python>-<os>-<flavor>
  <registry>/<name>:<torch>-cpu-py<python>-<os>-<flavor>                     (CPU)
Short aliases (moving; they follow the newest patch in the plan):
  <registry>/<name>:<major.minor>-cuda<cuda>-<flavor>    e.g. pytorch:2.9-cuda12.8-runtime
  <registry>/<name>:<major.minor>-cpu-<flavor>
Another platform than linux/amd64 adds its architecture before the flavor: <...>-<os>-arm64-<flavor> (and
<major.minor>-cuda<cuda>-arm64-<flavor>), as its variant key does, so `--only <key>-runtime` of one platform never
selects the other's. The default platform's tag has no suffix: it is the tag a pushed multi-platform index is
published under.
When several variants share an alias (same torch minor and CUDA, other Python/OS), it goes to the newest torch patch,
then the newest Python, then the first in matrix order. This is the only place that decides who owns an alias:
`ImagePlan.aliases` carries the decision, and build (tagging), bake and push read it through `references()`.
"""

from __future__ import annotations

from imagebuild.compat import accel, vtuple
from imagebuild.models import ImagePlan, ResolvedVariant, platform_suffix
from imagebuild.oci import alias_reference


def repository(variant: ResolvedVariant, registry: str | None) -> str:
    reg = (variant.registry if registry is None else registry).rstrip("/")
    return f"{reg}/{variant.name}" if reg else variant.name


def full_tag(variant: ResolvedVariant, flavor: str, registry: str | None = None) -> str:
    v = variant.versions
    cudnn = "" if v.cuda == "cpu" else f"-cudnn{(v.cudnn or '0').split('.')[0]}"
    return (f"{repository(variant, registry)}:{v.torch}-{accel(v.cuda)}{cudnn}-py{v.python}-{v.os}"
            f"{platform_suffix(variant.platform)}-{flavor}")


def alias_key(variant: ResolvedVariant, flavor: str) -> str:
    v = variant.versions
    minor = ".".join(v.torch.split(".")[:2])
    return f"{minor}-{accel(v.cuda)}{platform_suffix(variant.platform)}-{flavor}"


def assign_aliases(variants: list[ResolvedVariant], flavor: str, registry: str | None) -> dict[str, str]:
    """Map variant.key -> alias tag for the variants that own an alias for this flavor."""
    owners: dict[str, tuple[tuple[tuple[int, ...], tuple[int, ...]], int, ResolvedVariant]] = {}
    for order, variant in enumerate(variants):
        if flavor not in variant.flavors:
            continue
        key = alias_key(variant, flavor)
        rank = (vtuple(variant.versions.torch), vtuple(variant.versions.python))
        best = owners.get(key)
        if best is None or rank > best[0]:  # strictly newer wins; ties keep matrix order
            owners[key] = (rank, order, variant)
    return {v.key: f"{repository(v, registry)}:{key}" for key, (_, _, v) in owners.items()}


def references(image: ImagePlan) -> list[str]:
    """Every reference `image` is published under: its full tag, then the aliases the plan gave it, as full
    references (short aliases are tags of the image's repository), without repeats."""
    refs = [image.tag, *(alias_reference(image.repository, alias) for alias in image.aliases)]
    return list(dict.fromkeys(refs))


def index_references(image: ImagePlan) -> list[str]:
    """The references a multi-platform index holding `image` is published under: `references(image)` as the default
    platform's image of the same variant and flavor is named (the platform suffix taken out before the flavor). For
    a default-platform image these are its own references."""
    suffix = f"{platform_suffix(image.variant.platform)}-{image.flavor}"
    plain = f"-{image.flavor}"
    return [ref[: -len(suffix)] + plain if suffix != plain and ref.endswith(suffix) else ref
            for ref in references(image)]
