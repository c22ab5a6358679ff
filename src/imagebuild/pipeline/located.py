"""Is this planned image here? One answer for `build` (what needs no outside source), `test`, `push` and `run`:
the local image ID holding the planned inputs (its inputs-hash label proves it), or why there is none.

Also the record's word on each planned image for `plan` (record_states), which needs no engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from imagebuild.builder.uptodate import local_image
from imagebuild.engine.store import as_store
from imagebuild.models import ImagePlan, Plan
from imagebuild.oci import Reference, ReferenceSyntaxError
from imagebuild.record import Record


@dataclass(frozen=True)
class Located:
    image_id: str | None  # None: not in this engine with these inputs
    why: str = ""  # with image_id None: why not (one line)


@dataclass(frozen=True)
class RecordState:
    """What the record says of one planned image (the `built` column of `plan`)."""

    image_id: str | None
    summary: str  # the short image ID, "stale" (recorded with other inputs) or "-"
    why: str | None = None
    pushed: dict[str, str | None] = field(default_factory=dict)  # repository -> digest
    tests: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form `plan --json` and the table print (plan.output)."""
        if self.image_id:
            return {"image_id": self.image_id, "summary": self.summary, "pushed": self.pushed, "tests": self.tests}
        return {"image_id": None, "summary": self.summary, "why": self.why}


def recorded_state(rec: Record | None, img: ImagePlan) -> Located:
    """The image ID the record holds for exactly these inputs, or why not."""
    entry = rec.image(img.id) if rec is not None else None
    if entry is None:
        return Located(None, "not in the record (never built here)")
    if entry.inputs_hash != img.inputs_hash:
        return Located(None, f"the record's build has inputs hash {entry.inputs_hash[7:19]}, the plan now "
                             f"{img.inputs_hash[7:19]}: the matrix, templates or inputs changed since "
                             "(run imagebuild build)")
    if not entry.image_id:
        return Located(None, f"its last build {entry.status}"
                             + (f": {entry.error.splitlines()[0]}" if entry.error else ""))
    return Located(entry.image_id)


def locate(client: Any, img: ImagePlan, rec: Record | None) -> Located:
    """The local image ID holding `img`'s planned inputs (its label proves it), or (None, why not).

    The record's image ID first; else the plan's tag; else any tagged image carrying the inputs-hash label."""
    recorded = recorded_state(rec, img)
    found = local_image(as_store(client), img, first=(recorded.image_id,))
    if found is not None:
        return Located(found[0])
    record_entry = rec.image(img.id) if rec is not None else None
    source = (record_entry.source or "") if record_entry is not None else ""
    if recorded.image_id and source.startswith("registry"):
        return Located(None, f"up to date in {source.split(' ', 1)[1]} but not in this engine (build pulls it)")
    if recorded.image_id:
        return Located(None, f"the record's image {recorded.image_id[7:19]} is no longer in the engine "
                             "(run imagebuild build)")
    return Located(None, recorded.why or "not built")


def plan_registry(plan: Plan) -> str | None:
    """The registry prefix the plan's tags carry (`host:port/path`), None for local-only tags."""
    if not plan.images:
        return None
    try:
        ref = Reference.parse(plan.images[0].tag)
    except ReferenceSyntaxError:
        return None
    if ref.domain is None:
        return None
    return ref.name.rsplit("/", 1)[0]


def record_states(rec: Record | None, plan: Plan) -> dict[str, RecordState] | None:
    """plan id -> the record's word on that image: its image ID when built with these very inputs, "stale" when the
    record's build had other inputs, what its tests and pushes say. None without a record."""
    if rec is None:
        return None
    out: dict[str, RecordState] = {}
    for img in plan.images:
        entry = rec.image(img.id)
        here = recorded_state(rec, img)
        if here.image_id:
            tested = [t for t in rec.tests.values() if t.get("image_id") == here.image_id]
            out[img.id] = RecordState(
                here.image_id, here.image_id[7:19],
                pushed={repo: p.get("digest") for repo, p in entry.pushes.items()} if entry else {},
                tests=[{k: t.get(k) for k in ("passed", "failed", "skipped", "where", "at")} for t in tested])
        else:
            stale = entry is not None and entry.inputs_hash != img.inputs_hash
            out[img.id] = RecordState(None, "stale" if stale else "-", why=here.why)
    return out
