"""Security staleness of planned images (issue 42 item 4): `plan --security` shows it, `build --security-refresh`
acts on it.

Each planned image is checked as the record says it was built: the local image ID holding exactly the planned inputs
(locate: the record's image ID, its inputs-hash label proving it), its dpkg packages (the inventory kept per image ID)
against its release's signed security suite (audit/stale.py, one read of each suite per run). An image not in the
engine, or no engine, is "not checked": never fresh.

The refresh: each stale image gets a SecurityRefresh (the suite's identity, the packages to upgrade), rendered into
its apt steps (templates/_macros.j2), so its inputs hash and its apt layer's cache key change and its children
rebuild on it. Earlier refreshes stay in the build inputs (the record's `inputs.security_refresh`: a later build
without the flag keeps them, or its hash would fall back to the pre-refresh layers). With a lock, the packages it
pins are rewritten to the fixed versions (its install line pins them exactly); the upgrade line names packages only
(an exact version kept in the inputs would become a refused downgrade once a newer lock or bootstrap installs more)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from imagebuild.audit.debian import SecurityIndexes
from imagebuild.audit.os import Installed
from imagebuild.audit.stale import STALE, Staleness, not_checked, staleness
from imagebuild.errors import ImagebuildError
from imagebuild.inputs import BuildInputs, SecurityRefresh
from imagebuild.models import ImagePlan, Plan
from imagebuild.record import Record

Say = Callable[[str], None]
REASON = "security-refresh"


def check_images(images: list[ImagePlan], rec: Record | None, client: Any, kept: Any,
                 indexes: SecurityIndexes) -> dict[str, Staleness]:
    """plan id -> its staleness; `client` None: no engine (every image "not checked", with `kept` unused)."""
    from imagebuild.pipeline.keptfiles import local_inventory
    from imagebuild.pipeline.located import locate

    out: dict[str, Staleness] = {}
    for img in images:
        if client is None:
            out[img.id] = not_checked("no Docker engine answered: the built image could not be read")
            continue
        where = locate(client, img, rec)
        if where.image_id is None:
            out[img.id] = not_checked(f"image not in the engine: {where.why}")
            continue
        try:
            inv = local_inventory(client, kept, where.image_id)
        except ImagebuildError as exc:  # gone since, or unreadable: not checked, with why
            out[img.id] = not_checked(f"image {where.image_id[7:19]} not read: {exc}", where.image_id)
            continue
        rel = inv.os_release
        debs = [Installed(d.name, d.version, d.architecture, d.source, d.source_version) for d in inv.debs]
        out[img.id] = staleness(rel.id, rel.codename, inv.architecture or "amd64", debs, indexes, where.image_id)
    return out


def children_of(plan: Plan, ids: set[str]) -> list[str]:
    """Every planned image standing on one of `ids` (transitively), in plan order."""
    by_tag = plan.by_tag()
    out: list[str] = []
    chosen = set(ids)
    for img in plan.images:  # parents come first in the plan
        parent = by_tag.get(img.parent) if img.parent else None
        if parent is not None and parent.id in chosen and img.id not in chosen:
            chosen.add(img.id)
            out.append(img.id)
    return out


@dataclass(frozen=True)
class Refresh:
    """What one --security-refresh does: the inputs to plan with, the images refreshed, their children, and the
    record's reason per image."""

    inputs: BuildInputs
    stale: dict[str, Staleness]
    children: list[str]
    reasons: dict[str, str]
    indexes: Any = field(default=None, compare=False)  # the run's SecurityIndexes (checked again after the build)

    def fixed_versions(self) -> dict[str, dict[str, str]]:
        """image -> package -> the version the suite fixed it in (what a lock's pins are raised to)."""
        return {k: {f.package: f.fixed for f in s.fixes if f.package in s.upgradable} for k, s in self.stale.items()}


def refresh_reason(s: Staleness) -> str:
    """`security-refresh (3 fixes: libssl3 a→b, openssl a→b, …; index SUITE@DATE/sha256:…)`"""
    n = len(s.fixes)
    return f"{REASON} ({n} fix{'es' if n != 1 else ''}: {s.changes(limit=8)}; index {s.index})"


def plan_refresh(plan: Plan, inputs: BuildInputs, checked: dict[str, Staleness]) -> Refresh:
    """The inputs that refresh exactly the stale images (earlier refreshes of the other planned images kept), their
    children, and why each rebuilds (a lock's pins are raised apart: lock/refresh.py)."""
    stale = {k: s for k, s in checked.items() if s.state == STALE}
    planned = {i.id for i in plan.images}
    entries = {r.image: r for r in inputs.security_refresh if r.image in planned}  # an image gone from the plan: dropped
    for image, s in stale.items():
        # by name: the line stays in the image's inputs for later builds, and an exact `name=version` would turn into
        # a downgrade (apt refuses it) once a newer lock or bootstrap installs more; what a lock pins it pins exactly
        # on its own install line, raised to the fix (lock/refresh.py)
        entries[image] = SecurityRefresh(image, s.index, tuple(sorted(set(s.upgradable))))
    children = children_of(plan, set(stale))
    reasons = {k: refresh_reason(s) for k, s in stale.items()}
    for child in children:
        parents = [k for k in stale if k in _ancestors(plan, child)]
        reasons[child] = f"{REASON} of its parent {', '.join(parents)}"
    refreshed = tuple(sorted(entries.values(), key=lambda r: r.image))
    return Refresh(replace(inputs, security_refresh=refreshed), stale, children, reasons)


def _ancestors(plan: Plan, image_id: str) -> set[str]:
    by_tag, by_id = plan.by_tag(), {i.id: i for i in plan.images}
    out: set[str] = set()
    img = by_id.get(image_id)
    while img is not None and img.parent and img.parent in by_tag:
        img = by_tag[img.parent]
        out.add(img.id)
    return out


def _unreachable_fixes(img: ImagePlan, matrix: str) -> str | None:
    """Why this image's apt cannot reach the security suite's fixes, or None. A bootstrapped base's apt sources are
    the bootstrap's (builder/bootstrap.py): from a snapshot the security suite is read as it was at that date; from
    a mirror other than Debian's/Ubuntu's own they carry no -security suite. (A registry base's sources are its own:
    the check after the build says what stayed open.)"""
    from imagebuild.builder.bootstrap import spec_for
    from imagebuild.secrets import redact

    base, key = img.variant.base, img.variant.key
    if base.kind != "bootstrap":
        return None
    where = str(img.variant.source) if img.variant.source else matrix  # FILE:LINE of the variant's row
    if base.snapshot:
        return (f"{where}: snapshot: {base.snapshot} (variant {key}) pins the archive, its security suite included, "
                "at that date, so a rebuild cannot install the fixes; move `snapshot` to a later date or drop it, "
                "then build --security-refresh")
    spec = spec_for(img.variant)
    if not any(line.split()[2:3] == [f"{spec.codename}-security"] for line in spec.sources()):
        return (f"{where}: mirror: {redact(spec.mirror)} (variant {key}): the base's apt sources carry no "
                f"{spec.codename}-security suite, so a rebuild cannot install the fixes; bootstrap from the "
                "distribution's own mirror, or add the security suite to yours")
    return None


def refresh_inputs(plan: Plan, selected: list[ImagePlan], inputs: BuildInputs, rec: Record | None, client: Any,
                   kept: Any, indexes: SecurityIndexes, say: Say, matrix: str) -> Refresh:
    """`build --security-refresh`: check the selected images (and the parents they need), say each one's state on
    one line, and return the inputs that refresh the stale ones. A stale image whose apt cannot reach the fixes is
    a UsageError before anything builds; an image not checked is said and left as it is (never called fresh)."""
    from imagebuild.errors import UsageError

    checked = check_images(selected, rec, client, kept, indexes)
    by_id = {i.id: i for i in plan.images}
    for image_id, s in checked.items():
        if s.state == STALE:
            why = _unreachable_fixes(by_id[image_id], matrix)
            if why:
                raise UsageError(why)
            say(f"security-refresh: {image_id}: {s.summary} ({s.changes(limit=5)}; index {s.index})")
        else:
            say(f"security-refresh: {image_id}: {s.summary}" + (f" ({s.why})" if s.why else "")
                + (": not refreshed" if s.state != "fresh" else ""))
    return plan_refresh(plan, inputs, checked)


def apply_refresh(loaded: Any, selected: list[ImagePlan], registry: str | None, state_dir: str | None, say: Say,
                  indexes: SecurityIndexes | None = None) -> tuple[Any, Refresh]:
    """The refresh before a build: check, raise the lock's pins (when the matrix has a lock), plan again with the
    refreshing inputs. Returns the new Loaded (or the same one when nothing is stale) and the Refresh."""
    from imagebuild import engine
    from imagebuild.compat import load as load_tables
    from imagebuild.lock import load as load_lock
    from imagebuild.lock.refresh import raise_pins, write_lock
    from imagebuild.pipeline.loaded import load
    from imagebuild.record.derived import Derived

    client = engine.connect("inspect")
    lock = load_lock(loaded.plan.lock_file) if loaded.plan.lock_file else None
    indexes = indexes or SecurityIndexes(load_tables())
    refresh = replace(refresh_inputs(loaded.plan, selected, loaded.inputs, loaded.record, client,
                                     Derived(state_dir, say), indexes, say, str(loaded.path)), indexes=indexes)
    if not refresh.stale:
        say("security-refresh: no image is stale; nothing to refresh")
        return loaded, refresh
    if lock is not None:
        raised, changed = raise_pins(lock, refresh.fixed_versions())
        if changed:
            write_lock(raised, lock.path)
            moved = [f"{image}: {pkg} {a}→{b}" for image, pkgs in sorted(changed.items())
                     for pkg, (a, b) in sorted(pkgs.items())]
            say(f"security-refresh: {lock.path}: {len(moved)} pin(s) raised to the fixed versions ({'; '.join(moved)})")
        else:
            say(f"security-refresh: {lock.path} pins none of the fixed packages; unchanged")
    return load(str(loaded.path), registry, refresh.inputs, state_dir, say, building=True), refresh


def mark_rebuilt(rec: Record, plan: Plan, results: list[Any], refresh: Refresh | None,
                 after: dict[str, Staleness] | None = None) -> None:
    """The record's `rebuilt_because` of each image this build built: the refresh's reason (with what the rebuilt
    image still lacks, when checked after), else none (an image built for changed inputs needs no reason)."""
    by_tag = plan.by_tag()
    for res in results:
        img = by_tag.get(res.tag)
        entry = rec.images.get(img.id) if img is not None else None
        if img is None or entry is None or res.status != "built":
            continue
        reason = (refresh.reasons.get(img.id) if refresh is not None else None)
        if reason and after is not None and img.id in after:
            reason += f"; after the rebuild: {_after(after[img.id])}"
        entry.rebuilt_because = res.rebuilt_because = reason  # the record's and the report row's


def _after(s: Staleness) -> str:
    if s.state == STALE:
        return f"{len(s.fixes)} still open ({s.changes(limit=5)})"
    return "no fix open" if s.state == "fresh" else f"not checked ({s.why})"


def check_after(loaded: Any, refresh: Refresh, results: list[Any], state_dir: str | None, say: Say
                ) -> dict[str, Staleness]:
    """The refreshed images as built, checked again against the same run's index: what each still lacks is said
    (a mirror without the security suite, a snapshot) and recorded, never assumed fixed."""
    from imagebuild import engine
    from imagebuild.compat import load as load_tables
    from imagebuild.record.derived import Derived

    built = {r.tag for r in results if r.status == "built"}
    images = [i for i in loaded.plan.images if i.id in refresh.stale and i.tag in built]
    if not images:
        return {}
    after = check_images(images, loaded.record, engine.connect("inspect"), Derived(state_dir, say),
                         refresh.indexes or SecurityIndexes(load_tables()))
    for image_id, s in after.items():
        say(f"security-refresh: {image_id} rebuilt: {_after(s)}")
    return after
