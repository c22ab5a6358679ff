"""Assemble the plan: every resolved variant x flavor, parents first, each with its rendered Dockerfile and hash."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.errors import UsageError
from imagebuild.inputs import BuildInputs
from imagebuild.lock import Lock, LockError, entry_digest, lock_path
from imagebuild.lock import problems as lock_problems
from imagebuild.models import (
    DEFAULT_PLATFORM,
    FLAVORS,
    PARENT_FLAVOR,
    ImagePlan,
    Plan,
    ResolvedVariant,
    TEWheelPlan,
)
from imagebuild.oci import ReferenceSyntaxError, check_registry
from imagebuild.oci.reference import check_repository_room
from imagebuild.plan import tags
from imagebuild.plan.hashing import inputs_hash, save_cache
from imagebuild.plan.only import (
    matches as matches,  # --only's matcher (plan/only.py), importable here as before
)
from imagebuild.plan.only import matching as matching
from imagebuild.plan.only import select as select
from imagebuild.plan.paths import (
    default_render_dir as default_render_dir,  # commands/render imports it from here
)
from imagebuild.secrets import redact_host

if TYPE_CHECKING:
    from imagebuild.render import RenderedImage


def _needed_flavors(variant: ResolvedVariant) -> list[str]:
    """The variant's flavors plus the parents they stand on (dev needs runtime needs base), in build order."""
    wanted = set(variant.flavors)
    for flavor in list(wanted):
        parent = PARENT_FLAVOR[flavor]
        while parent:
            wanted.add(parent)
            parent = PARENT_FLAVOR[parent]
    return [f for f in FLAVORS if f in wanted]


def _base_source_inputs(variant: ResolvedVariant) -> dict[str, Any]:
    base = variant.base
    if base.kind == "registry":
        return {"kind": "registry", "ref": base.ref}
    return {
        "kind": "bootstrap",
        "os": variant.os.id,
        "mirror": base.mirror or variant.os.mirror,
        "snapshot": base.snapshot,
        "packages": sorted(base.packages),
    }


def plan_from_variants(
    variants: list[ResolvedVariant],
    inputs: BuildInputs,
    registry: str | None = None,
    matrix_file: str = "",
    render_dir: Path | None = None,
    lock: Lock | None = None,
) -> Plan:
    """Every variant x needed flavor, parents first. With `lock`, images install what it pins, its entries are part
    of their inputs hashes, and a lock that does not fit the matrix is a LockError naming every image and entry."""
    from imagebuild.render import render_image  # imported late: rendering needs jinja2 and the templates
    from imagebuild.render.te_wheel import render_te_wheel

    if registry:  # the matrix's own `registry` was checked with the schema; '' means local-only tags
        try:
            check_registry(registry)
            for name in sorted({v.name for v in variants}):
                check_repository_room(f"{registry.rstrip('/')}/{name}")
        except ReferenceSyntaxError as exc:
            raise UsageError(f"--registry {redact_host(registry)!r}: {exc}") from None
    images: list[ImagePlan] = []
    aliases = {f: tags.assign_aliases(variants, f, registry) for f in FLAVORS}
    for variant in variants:
        parent: ImagePlan | None = None
        for flavor in _needed_flavors(variant):
            image_id = f"{variant.key}-{flavor}"
            locked = lock.images.get(image_id) if lock else None
            rendered = render_image(variant, flavor, inputs, locked)
            extra: dict[str, object] = {"base": _base_source_inputs(variant)} if parent is None else {}
            if variant.platform != DEFAULT_PLATFORM:  # the default platform's hashes stay as they were
                extra["platform"] = variant.platform
            if locked is not None:  # the entry's content, not the file's header, path or time
                extra["lock"] = entry_digest(locked)
            digest = inputs_hash(
                rendered.dockerfile,
                rendered.build_args,
                rendered.labels,
                rendered.context_files,
                rendered.context_dirs,
                parent.inputs_hash if parent else None,
                extra=extra or None,
            )
            alias = aliases[flavor].get(variant.key)
            plan = ImagePlan(
                id=image_id,
                tag=tags.full_tag(variant, flavor, registry),
                flavor=flavor,
                parent=parent.tag if parent else None,
                variant=variant,
                dockerfile=rendered.dockerfile,
                build_args=dict(rendered.build_args),
                context_files=dict(rendered.context_files),
                labels=dict(rendered.labels),
                inputs_hash=digest,
                context_dirs=dict(rendered.context_dirs),
                secret_build_args=dict(rendered.secret_build_args),
                aliases=(alias,) if alias else (),
                dockerfile_path=(render_dir / image_id / "Dockerfile") if render_dir else None,
                te_wheel=_te_wheel_plan(render_te_wheel(variant, inputs)) if flavor == "runtime" else None,
                pip_requirements=rendered.pip_requirements,
                apt_packages=rendered.apt_packages,
                env_layers=rendered.env_layers,
                locked=locked is not None,
            )
            images.append(plan)
            parent = plan
    save_cache()
    if lock is not None:
        found = lock_problems(lock, images)
        if found:
            hint = f"`imagebuild lock --matrix {matrix_file or lock.matrix}` rewrites it from the matrix"
            raise LockError(f"{found[0]}; {hint}" if len(found) == 1 else
                            "\n".join(f"error: {line}" for line in found) + f"\nerror: {hint}")
    return Plan(matrix_file=matrix_file, images=images, lock_file=lock.path if lock else "")



def assemble_plan(matrix_path: str | Path, inputs: BuildInputs, registry: str | None, render_dir: Path,
                  use_lock: bool) -> Plan:
    """make_plan's work when the cache has no plan: load, validate, resolve, lock, render and hash the matrix."""
    from imagebuild.lock import load
    from imagebuild.matrix import load_matrix
    from imagebuild.resolve import resolve_matrix

    doc = load_matrix(matrix_path)
    variants = resolve_matrix(doc, inputs)
    path = lock_path(matrix_path)
    lock = load(path) if use_lock and path.is_file() else None
    return plan_from_variants(variants, inputs, registry=registry, matrix_file=str(matrix_path),
                              render_dir=render_dir, lock=lock)


def _te_wheel_plan(rendered: RenderedImage | None) -> TEWheelPlan | None:
    from imagebuild.render.te_key import KEY_LABEL  # late, as render_image: the render package loads jinja2

    if rendered is None:
        return None
    return TEWheelPlan(key=rendered.labels[KEY_LABEL], dockerfile=rendered.dockerfile,
                       build_args=dict(rendered.build_args), secret_build_args=dict(rendered.secret_build_args),
                       context_dirs=dict(rendered.context_dirs))
