"""What every command after `build` needs: the plan with the build's inputs (from the record), and where each
planned image is — so `plan`, `test`, `push`, `bake`, `report` show the hash the image carries without the build's
flags repeated."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from imagebuild.builder.uptodate import INPUTS_LABEL
from imagebuild.inputs import BuildInputs
from imagebuild.models import ImagePlan, Plan
from imagebuild.record import Record, load_record


@dataclass
class Planned:
    path: Path
    plan: Plan
    record: Record | None  # None: no (trustworthy) record yet
    inputs: BuildInputs
    registry: str | None


def plan_with_record(matrix: str, registry: str | None, inputs: BuildInputs | None, echo: Callable[[str], None],
                     state_dir: str | None = None) -> Planned:
    """Plan `matrix` with the given build-input flags, else with the inputs its record says the images were built
    with. A record that cannot be trusted (other schema, other matrix file) is said and ignored; flags that differ
    from the record's are said (the plan then describes other images than the record)."""
    from imagebuild.commands._options import resolve_matrix_path
    from imagebuild.plan import make_plan

    path = resolve_matrix_path(matrix)
    rec = load_record(path, state_dir)
    if rec is not None and rec.problem:
        echo(f"warning: {rec.problem}")
        rec = None
    given = inputs is not None and inputs != BuildInputs()
    if given:
        assert inputs is not None
        if rec is not None and rec.inputs != inputs.public():
            echo(f"note: {rec.path} records a build with other inputs ({rec.describe_inputs()}); planning with "
                 "the flags given")
        use = inputs
    elif rec is not None:
        use = rec.build_inputs()
        if use != BuildInputs():
            echo(f"inputs from {rec.path}: {rec.describe_inputs()}")
    else:
        use = BuildInputs()
    if registry is None and rec is not None:
        registry = rec.registry
    plan = make_plan(path, use, registry)
    return Planned(path, plan, rec, use, registry)


def recorded_state(rec: Record | None, img: ImagePlan) -> tuple[str | None, str | None]:
    """(image ID the record holds for exactly these inputs, why not) for one planned image."""
    entry = rec.image(img.id) if rec is not None else None
    if entry is None:
        return None, "not in the record (never built here)"
    if entry.inputs_hash != img.inputs_hash:
        return None, (f"the record's build has inputs hash {entry.inputs_hash[7:19]}, the plan now "
                      f"{img.inputs_hash[7:19]}: the matrix, templates or inputs changed since (run imagebuild build)")
    if not entry.image_id:
        return None, f"its last build {entry.status}" + (f": {entry.error.splitlines()[0]}" if entry.error else "")
    return entry.image_id, None


def locate(client, img: ImagePlan, rec: Record | None) -> tuple[str | None, str]:
    """The local image ID holding `img`'s planned inputs (its label proves it), or (None, why not).

    The record's image ID first; else the plan's tag; else any tagged image carrying the inputs-hash label."""
    import docker.errors

    def labels_ok(info: dict) -> bool:
        return ((info.get("Config") or {}).get("Labels") or {}).get(INPUTS_LABEL) == img.inputs_hash

    recorded, why = recorded_state(rec, img)
    for ref in (recorded, img.tag):
        if not ref:
            continue
        try:
            info = client.api.inspect_image(ref)
        except docker.errors.ImageNotFound:
            continue
        if labels_ok(info):
            return info["Id"], ""
    for entry in client.api.images(filters={"label": f"{INPUTS_LABEL}={img.inputs_hash}"}):
        if [t for t in entry.get("RepoTags") or [] if t != "<none>:<none>"]:
            return entry["Id"], ""
    entry = rec.image(img.id) if rec is not None else None
    source = (entry.source or "") if entry is not None else ""
    if recorded and source.startswith("registry"):
        return None, f"up to date in {source.split(' ', 1)[1]} but not in this engine (build pulls it)"
    if recorded:
        return None, f"the record's image {recorded[7:19]} is no longer in the engine (run imagebuild build)"
    return None, why or "not built"


def plan_registry(plan: Plan) -> str | None:
    """The registry prefix the plan's tags carry (`host:port/path`), None for local-only tags."""
    from imagebuild.oci import Reference, ReferenceError

    if not plan.images:
        return None
    try:
        ref = Reference.parse(plan.images[0].tag)
    except ReferenceError:
        return None
    if ref.domain is None:
        return None
    return ref.name.rsplit("/", 1)[0]


def record_states(rec: Record | None, plan: Plan) -> dict[str, dict] | None:
    """plan id -> the record's word on that image (for `plan`): its image ID when built with these very inputs,
    "stale" when the record's build had other inputs, what its tests and pushes say. None without a record."""
    if rec is None:
        return None
    out: dict[str, dict] = {}
    for img in plan.images:
        entry = rec.image(img.id)
        image_id, why = recorded_state(rec, img)
        state: dict = {"image_id": image_id}
        if image_id:
            state["summary"] = image_id[7:19]
            state["pushed"] = {repo: p.get("digest") for repo, p in entry.pushes.items()} if entry else {}
            tested = [t for t in rec.tests.values() if t.get("image_id") == image_id]
            state["tests"] = [{k: t.get(k) for k in ("passed", "failed", "skipped", "where", "at")} for t in tested]
        else:
            state["summary"] = "stale" if entry is not None and entry.inputs_hash != img.inputs_hash else "-"
            state["why"] = why
        out[img.id] = state
    return out
