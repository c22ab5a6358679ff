"""Issue 42 item 4, stale means rebuild: `plan --security` marks an image whose inputs are unchanged but whose
release's security suite has fixes for it; `build --security-refresh` rebuilds exactly those images and their
children (the apt step carries the index it saw), the record says why, a lock's pins are raised.

The REAL bookworm-security index (tests/unit/_security_index.py: cached, verified with the pinned keys), the one fake
engine, images whose dpkg databases are real Packages stanzas (libssl3 replaced by an old version where stale)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from _fake_engine import FakeEngine
from _security_index import OLD_SSL, debian12_fs, packages_text, real_indexes, stanzas_of, status_file, tar_of
from _support import variant

from imagebuild.audit.debian import SecurityIndexes
from imagebuild.audit.stale import FRESH, NOT_CHECKED, STALE, index_identity
from imagebuild.builder.uptodate import INPUTS_LABEL
from imagebuild.errors import UsageError
from imagebuild.inputs import BuildInputs, SecurityRefresh
from imagebuild.models import ImageResult, Plan
from imagebuild.pipeline.staleness import (
    check_images,
    children_of,
    mark_rebuilt,
    plan_refresh,
    refresh_inputs,
)
from imagebuild.plan.assemble import plan_from_variants
from imagebuild.plan.output import plan_json, print_table
from imagebuild.record.derived import Derived
from imagebuild.record.store import ImageRecord, Record, shape_problem

KEY = "2.13.0-cpu-py3.11-debian12"


@pytest.fixture(scope="module")
def index():
    return real_indexes()


def _fs(indexes, index, stale: bool) -> bytes:
    return debian12_fs(indexes, index, stale)


def _plan(inputs: BuildInputs | None = None) -> Plan:
    """A real render of one CPU variant (registry base), so a refresh reaches the Dockerfiles and hashes."""
    return plan_from_variants([variant(KEY)], inputs or BuildInputs(), matrix_file="cpu.yaml")


def _engine_and_record(plan: Plan, indexes, index, stale: dict[str, bool | None]) -> tuple[FakeEngine, Record]:
    """Each image the record says was built; in the engine (stale or current packages) unless its value is None."""
    engine, rec = FakeEngine(), Record("cpu.yaml", None, {}, None)
    for img in plan.images:
        iid = "sha256:" + f"{img.flavor:0<8}".encode().hex().ljust(64, "0")
        rec.images[img.id] = ImageRecord(img.id, img.flavor, img.inputs_hash, image_id=iid, status="built")
        if stale[img.flavor] is not None:
            engine.add_image(img.tag, {INPUTS_LABEL: img.inputs_hash}, image_id=iid, Architecture="amd64")
            engine.filesystems[iid] = _fs(indexes, index, bool(stale[img.flavor]))
    return engine, rec


def test_stale_is_marked_with_its_count_fresh_is_not_and_a_missing_image_is_not_checked(index, tmp_path, capsys):
    indexes, real = index
    plan = _plan()
    base, runtime, dev = plan.images
    engine, rec = _engine_and_record(plan, indexes, real, {"base": True, "runtime": False, "dev": None})
    got = check_images(plan.images, rec, engine, Derived(tmp_path, print), indexes)
    assert got[base.id].state == STALE and got[base.id].image_id == rec.images[base.id].image_id
    assert [(f.package, f.installed, f.fixed) for f in got[base.id].fixes] == \
        [("libssl3", OLD_SSL, real.binaries["libssl3"].version)]
    assert got[base.id].index == index_identity(real) and got[base.id].index.startswith(f"bookworm-security@{real.date}/sha256:")
    assert got[runtime.id].state == FRESH and got[runtime.id].fixes == ()
    assert got[dev.id].state == NOT_CHECKED and "not in the engine" in got[dev.id].why

    rows = {r["id"]: r for r in json.loads(plan_json(plan, None, None, got))}
    assert rows[base.id]["stale"] == {"security_fixes": 1, "index": index_identity(real), "fixes": [
        {"package": "libssl3", "installed": OLD_SSL, "fixed": real.binaries["libssl3"].version,
         "source_package": "openssl"}]}
    assert rows[runtime.id]["stale"] is False and rows[runtime.id]["security"]["state"] == "fresh"
    assert rows[dev.id]["stale"] is None and rows[dev.id]["security"]["state"] == "not checked"
    assert "stale" not in json.loads(plan_json(plan))[0]  # without --security: no field at all

    capsys.readouterr()
    print_table(plan, security=got)
    text = capsys.readouterr().out
    assert "│ stale: 1 security fix │" in text and "│ fresh " in text and "│ not checked " in text
    assert (f"{base.short_tag}: stale: 1 security fix against {index_identity(real)}: libssl3 "
            f"{OLD_SSL}→{real.binaries['libssl3'].version}") in text
    assert f"{dev.short_tag}: not checked: image not in the engine" in text


def test_an_image_other_inputs_or_no_trusted_index_is_not_checked_never_fresh(index, tmp_path):
    indexes, real = index
    plan = _plan()
    engine, rec = _engine_and_record(plan, indexes, real, {"base": False, "runtime": False, "dev": False})
    rec.images[plan.images[1].id].inputs_hash = "sha256:" + "1" * 64  # the record's build had other inputs
    engine.images_by_id[rec.images[plan.images[1].id].image_id]["Config"]["Labels"][INPUTS_LABEL] = "sha256:" + "1" * 64

    def down(url: str, timeout: float) -> bytes:
        raise OSError("offline")

    offline = SecurityIndexes(indexes.tables, fetch=down, cache=tmp_path / "empty")
    got = check_images(plan.images, rec, engine, Derived(tmp_path, print), offline)
    assert all(s.state == NOT_CHECKED for s in got.values())
    assert "not reachable" in got[plan.images[0].id].why and "not in the engine" in got[plan.images[1].id].why
    online = check_images(plan.images, rec, engine, Derived(tmp_path, print), indexes)
    assert online[plan.images[0].id].state == FRESH and online[plan.images[1].id].state == NOT_CHECKED
    nothing = check_images(plan.images, rec, None, Derived(tmp_path, print), indexes)  # no engine
    assert all(s.state == NOT_CHECKED for s in nothing.values())


def test_refresh_selects_exactly_the_stale_images_and_their_children_and_the_key_changes_only_then(index, tmp_path):
    indexes, real = index
    plan = _plan()
    base, runtime, dev = plan.images
    engine, rec = _engine_and_record(plan, indexes, real, {"base": True, "runtime": True, "dev": False})
    got = check_images(plan.images, rec, engine, Derived(tmp_path, print), indexes)
    refresh = plan_refresh(plan, BuildInputs(), got)
    assert set(refresh.stale) == {base.id, runtime.id} and refresh.children == [dev.id]
    again = _plan(refresh.inputs)
    for old, new in zip(plan.images, again.images, strict=True):
        assert old.inputs_hash != new.inputs_hash  # base and runtime refreshed, dev on a new parent
    line = f"    : 'security-refresh {index_identity(real)}'; \\"
    assert line in again.images[0].dockerfile and line in again.images[1].dockerfile
    assert "--only-upgrade \\\n        libssl3; \\" in again.images[0].dockerfile
    assert again.images[2].dockerfile == dev.dockerfile  # the child rebuilds because its parent changed
    assert [i.inputs_hash for i in _plan().images] == [i.inputs_hash for i in plan.images]  # no refresh: as before
    assert "security-refresh" not in "".join(i.dockerfile for i in plan.images)

    # only the child stale: its parent keeps its hash, the child and its own child move
    only_runtime = {k: (v if k == runtime.id else dataclasses.replace(v, state=FRESH, fixes=())) for k, v in got.items()}
    second = plan_refresh(plan, BuildInputs(), only_runtime)
    assert set(second.stale) == {runtime.id} and second.children == [dev.id]
    moved = _plan(second.inputs)
    assert moved.images[0].inputs_hash == base.inputs_hash
    assert moved.images[1].inputs_hash != runtime.inputs_hash and moved.images[2].inputs_hash != dev.inputs_hash
    assert children_of(plan, {base.id}) == [runtime.id, dev.id]

    # nothing stale, nothing checked: the inputs are the ones given (an earlier refresh of another image kept)
    earlier = BuildInputs(security_refresh=(SecurityRefresh(base.id, "bookworm-security@x/sha256:y", ("zlib1g",)),))
    none = plan_refresh(plan, earlier, {k: dataclasses.replace(v, state=NOT_CHECKED, fixes=()) for k, v in got.items()})
    assert none.stale == {} and none.children == [] and none.inputs == earlier
    kept = plan_refresh(plan, earlier, second.stale)
    assert {r.image for r in kept.inputs.security_refresh} == {base.id, runtime.id}


def test_refresh_under_a_lock_upgrades_exactly_and_raises_the_pins(index, tmp_path):
    from imagebuild.lock.model import Lock, LockedImage, dump, parse
    from imagebuild.lock.refresh import raise_pins

    indexes, real = index
    plan = _plan()
    base = plan.images[0]
    engine, rec = _engine_and_record(plan, indexes, real, {"base": True, "runtime": False, "dev": False})
    got = check_images(plan.images, rec, engine, Derived(tmp_path, print), indexes)
    fixed = real.binaries["libssl3"].version
    refresh = plan_refresh(plan, BuildInputs(), got)
    assert refresh.inputs.refresh_for(base.id).upgrade == ("libssl3",)  # by name: the lock's line pins exactly
    lock = Lock("cpu.yaml", {base.id: LockedImage(base.id, "debian12", "3.11", "manylinux_2_36_x86_64", (),
                                                   apt={"libssl3": OLD_SSL, "tini": "0.19.0-1", "zz": "9:1"})})
    raised, changed = raise_pins(lock, {**refresh.fixed_versions(), base.id: {"libssl3": fixed, "zz": "1:1",
                                                                              "not-pinned": "1"}})
    assert changed == {base.id: {"libssl3": (OLD_SSL, fixed)}}  # never lowered, never added
    assert raised.images[base.id].apt == {"libssl3": fixed, "tini": "0.19.0-1", "zz": "9:1"}
    back = parse(dump(raised), "cpu.lock")
    assert back.seal == "ok" and back.images[base.id].apt["libssl3"] == fixed
    same, none = raise_pins(raised, refresh.fixed_versions())
    assert none == {} and same.images == raised.images


def test_a_base_from_a_snapshot_cannot_reach_the_fixes_one_error_before_building(index, tmp_path):
    from imagebuild.models import BaseSource

    indexes, real = index
    var = variant(KEY, base=BaseSource(kind="bootstrap", snapshot="20240101T000000Z"))
    plan = plan_from_variants([var], BuildInputs(), matrix_file="cpu.yaml")
    engine, rec = _engine_and_record(plan, indexes, real, {"base": True, "runtime": False, "dev": False})
    said: list[str] = []
    with pytest.raises(UsageError, match=r"^cpu.yaml: snapshot: 20240101T000000Z \(variant 2.13.0-cpu-py3.11-"
                                         r"debian12\) pins the archive"):
        refresh_inputs(plan, plan.images, BuildInputs(), rec, engine, Derived(tmp_path, print), indexes,
                       said.append, "cpu.yaml")
    from imagebuild.pipeline.staleness import _unreachable_fixes
    from imagebuild.plan import make_plan

    real_base = make_plan(Path(__file__).resolve().parents[2] / "images" / "cpu.yaml").images[0]
    assert _unreachable_fixes(real_base, "x") is None  # the shipped matrix: Debian's own mirror, no snapshot
    snap = dataclasses.replace(real_base, variant=dataclasses.replace(
        real_base.variant, base=dataclasses.replace(real_base.variant.base, snapshot="20240101T000000Z")))
    assert (_unreachable_fixes(snap, "x") or "").startswith(f"{real_base.variant.source}: snapshot: 20240101T000000Z")
    assert re.fullmatch(r".*images/cpu\.yaml:[1-9]\d*", str(real_base.variant.source))  # file:line of its row
    internal = variant(KEY, base=BaseSource(kind="bootstrap", mirror="http://u:pw@mirror.internal/debian"))
    plan2 = plan_from_variants([internal], BuildInputs(), matrix_file="cpu.yaml")
    engine2, rec2 = _engine_and_record(plan2, indexes, real, {"base": True, "runtime": False, "dev": False})
    with pytest.raises(UsageError, match=r"^cpu.yaml: mirror: http://u:\*\*\*@mirror.internal/debian \(variant "
                                         r".*\): the base's apt sources carry no bookworm-security suite"):
        refresh_inputs(plan2, plan2.images, BuildInputs(), rec2, engine2, Derived(tmp_path / "3", print), indexes,
                       said.append, "cpu.yaml")
    default = variant(KEY, base=BaseSource(kind="bootstrap"))  # Debian's own mirror: its -security suite is there
    plan3 = plan_from_variants([default], BuildInputs(), matrix_file="cpu.yaml")
    engine3, rec3 = _engine_and_record(plan3, indexes, real, {"base": True, "runtime": False, "dev": False})
    assert set(refresh_inputs(plan3, plan3.images, BuildInputs(), rec3, engine3, Derived(tmp_path / "4", print),
                              indexes, said.append, "cpu.yaml").stale) == {plan3.images[0].id}
    fresh, _ = _engine_and_record(plan, indexes, real, {"base": False, "runtime": False, "dev": None})
    ok = refresh_inputs(plan, plan.images, BuildInputs(), rec, fresh, Derived(tmp_path / "2", print), indexes,
                        said.append, "cpu.yaml")
    assert ok.stale == {} and any("not checked" in s and "not refreshed" in s for s in said)


def test_the_record_says_why_an_image_was_rebuilt_and_keeps_the_refresh(index, tmp_path):
    indexes, real = index
    plan = _plan()
    base, runtime, dev = plan.images
    engine, rec = _engine_and_record(plan, indexes, real, {"base": True, "runtime": False, "dev": False})
    refresh = plan_refresh(plan, BuildInputs(), check_images(plan.images, rec, engine, Derived(tmp_path, print),
                                                             indexes))
    rows = []
    for img, status in zip(plan.images, ("built", "built", "up-to-date"), strict=True):
        row = ImageResult.of(img)
        row.status = status
        rows.append(row)
    after = {base.id: dataclasses.replace(refresh.stale[base.id], state=FRESH, fixes=())}
    mark_rebuilt(rec, plan, rows, refresh, after)
    fixed = real.binaries["libssl3"].version
    assert rec.images[base.id].rebuilt_because == (f"security-refresh (1 fix: libssl3 {OLD_SSL}→{fixed}; index "
                                                   f"{index_identity(real)}); after the rebuild: no fix open")
    assert rec.images[runtime.id].rebuilt_because == f"security-refresh of its parent {base.id}"
    assert rec.images[dev.id].rebuilt_because is None  # not built by this run: no reason claimed
    # the build report's rows say the same: the JSON row's rebuilt_because, the Markdown status cell
    assert [r.rebuilt_because for r in rows] == [rec.images[i.id].rebuilt_because for i in (base, runtime)] + [None]
    from imagebuild.report.writer import _status_cell, result_to_row

    assert _status_cell(result_to_row(rows[1])).endswith(f"(security-refresh of its parent {base.id})")
    assert "(" not in _status_cell(result_to_row(rows[2])).replace("(built", "")
    still = {base.id: refresh.stale[base.id]}
    mark_rebuilt(rec, plan, rows, refresh, still)
    assert rec.images[base.id].rebuilt_because.endswith(f"after the rebuild: 1 still open (libssl3 {OLD_SSL}→{fixed})")

    # the refresh is part of the recorded inputs and comes back from them (a later plan shows the built hash)
    rec.inputs = refresh.inputs.public()
    doc = json.loads(rec.to_json())
    assert shape_problem(doc) is None and doc["images"][base.id]["rebuilt_because"].startswith("security-refresh (1 fix")
    assert rec.build_inputs() == refresh.inputs
    assert "security refresh of " + base.id in rec.describe_inputs()
    doc["inputs"]["security_refresh"][base.id]["upgrade"] = "libssl3"
    assert shape_problem(doc) == "inputs.security_refresh must map plan ids to {index: string, upgrade: [strings]}"
    doc["inputs"]["security_refresh"] = {base.id: {"upgrade": []}}
    assert shape_problem(doc) is not None


def test_a_later_build_without_the_flag_keeps_the_recorded_refresh(index, tmp_path, monkeypatch):
    """pipeline.loaded.load: a build (or a plan with flags) without --security-refresh plans with the record's
    refreshes, so its hashes are the refreshed images' (not the pre-refresh layers)."""
    from imagebuild.pipeline.loaded import load
    from imagebuild.record import updating

    matrix = tmp_path / "cpu.yaml"
    matrix.write_text("x: 1\n")
    monkeypatch.setattr("imagebuild.pipeline.loaded.make_plan", lambda path, inputs, registry: _plan(inputs))
    refreshed = BuildInputs(backend="classic", security_refresh=(
        SecurityRefresh(f"{KEY}-base", "bookworm-security@2026-12-01T00:00:00Z/sha256:abc", ("libssl3",)),))
    with updating(matrix, refreshed, None, directory=tmp_path / "state", replace_inputs=True):
        pass
    said: list[str] = []
    later = load(str(matrix), None, BuildInputs(backend="classic"), str(tmp_path / "state"), said.append, building=True)
    assert later.inputs == refreshed and later.plan.images[0].inputs_hash == _plan(refreshed).images[0].inputs_hash
    assert said == [f"note: keeping the security refresh recorded for {KEY}-base"]
    shown = load(str(matrix), None, None, str(tmp_path / "state"), said.append)  # plan: the record's inputs
    assert shown.inputs == refreshed


def test_build_security_refresh_rebuilds_the_stale_images_and_their_children_over_the_fake_engine(
        index, tmp_path, monkeypatch):
    """pipeline.flow.build_run end to end: a first build whose base and runtime miss a security fix (dev, in this
    fake, does not); --security-refresh rebuilds base and runtime with the key line, dev on the new parent, checks
    the rebuilt images again and records why; a later build without the flag is a no-op (the refresh is kept); a
    second --security-refresh finds nothing stale."""
    import imagebuild.engine
    from imagebuild.pipeline import flow
    from imagebuild.pipeline.settings import BuildSettings, RunOptions, Step
    from imagebuild.record import load_record

    indexes, real = index
    matrix = tmp_path / "cpu.yaml"
    matrix.write_text("x: 1\n")
    monkeypatch.setattr("imagebuild.pipeline.loaded.make_plan", lambda path, inputs, registry: _plan(inputs))
    monkeypatch.setattr("imagebuild.audit.debian.SecurityIndexes", lambda tables: indexes)
    monkeypatch.setattr("imagebuild.pipeline.staleness.SecurityIndexes", lambda tables: indexes)
    monkeypatch.setattr("imagebuild.pipeline.building.unreachable", lambda *a, **k: {})
    engine = FakeEngine()
    engine.add_image("example/os:1@sha256:" + "0" * 64, {})
    monkeypatch.setattr(imagebuild.engine, "connect", lambda *a, **k: engine)

    class Filesystems(dict):
        def __missing__(self, image_id: str) -> bytes:  # an image the fake built: stale unless its apt step refreshed
            build = next(b for b in reversed(engine.builds) if engine.tags.get(b["tag"]) == image_id)
            fixed = "security-refresh" in build["dockerfile"] or build["tag"].endswith("-dev")
            self[image_id] = _fs(indexes, real, stale=not fixed)
            return self[image_id]

    engine.filesystems = Filesystems()
    state, said = tmp_path / "state", []

    def build(refresh: bool, report: str):
        options = RunOptions(Step.BUILD, str(matrix), inputs=BuildInputs(backend="classic"), state_dir=str(state),
                             report_dir=tmp_path / report,
                             build=BuildSettings(plain=True, sbom=False, security_refresh=refresh))
        said.clear()
        result = flow.build_run(options, said.append, said.append)
        assert result.ok
        return {r.tag.split(":", 1)[1].rsplit("-", 1)[1]: r.status for r in result.results}

    base, runtime, dev = (i.id for i in _plan().images)
    assert build(False, "r1") == {"base": "built", "runtime": "built", "dev": "built"}
    assert all(e.rebuilt_because is None for e in load_record(matrix, state).images.values())
    first_ids = {k: v.image_id for k, v in load_record(matrix, state).images.items()}

    builds_before = len(engine.builds)
    assert build(True, "r2") == {"base": "built", "runtime": "built", "dev": "built"}
    rebuilt = {b["tag"].rsplit("-", 1)[1]: b["dockerfile"] for b in engine.builds[builds_before:]}
    line = f": 'security-refresh {index_identity(real)}'"
    assert line in rebuilt["base"] and line in rebuilt["runtime"] and line not in rebuilt["dev"]
    fixed = real.binaries["libssl3"].version
    assert f"security-refresh: {base}: stale: 1 security fix (libssl3 {OLD_SSL}→{fixed}; index " \
           f"{index_identity(real)})" in said
    assert f"security-refresh: {dev}: fresh" in said
    assert f"note: this build adds a security refresh of {base}, {runtime} to the recorded inputs" in said
    assert not any("recorded a build with other inputs" in line for line in said)
    assert f"security-refresh: {base} rebuilt: no fix open" in said
    rec = load_record(matrix, state)
    assert rec.images[base].rebuilt_because == (f"security-refresh (1 fix: libssl3 {OLD_SSL}→{fixed}; index "
                                                f"{index_identity(real)}); after the rebuild: no fix open")
    assert rec.images[dev].rebuilt_because == f"security-refresh of its parent {base}, {runtime}"
    assert all(rec.images[k].image_id != first_ids[k] for k in (base, runtime, dev))
    assert sorted(rec.inputs["security_refresh"]) == [base, runtime]

    builds_before = len(engine.builds)
    assert build(False, "r3") == {"base": "up-to-date", "runtime": "up-to-date", "dev": "up-to-date"}
    assert len(engine.builds) == builds_before and f"note: keeping the security refresh recorded for {base}, " \
        f"{runtime}" in said
    assert load_record(matrix, state).images[base].rebuilt_because == rec.images[base].rebuilt_because  # a no-op

    assert build(True, "r4") == {"base": "up-to-date", "runtime": "up-to-date", "dev": "up-to-date"}
    assert "security-refresh: no image is stale; nothing to refresh" in said and len(engine.builds) == builds_before


def test_build_security_refresh_implies_the_tests(monkeypatch):
    from click.testing import CliRunner

    from imagebuild.cli import cli
    from imagebuild.pipeline import flow

    seen = []

    class Done:
        ok, report_md = True, "r.md"

    monkeypatch.setattr(flow, "build_run", lambda options, say, show: seen.append(options) or Done())
    monkeypatch.setattr("imagebuild.engine.cli.prefetch_versions", lambda: None)
    out = CliRunner().invoke(cli, ["build", "--matrix", "images/cpu.yaml", "--security-refresh"], standalone_mode=False)
    assert out.exit_code == 0 and out.return_value == 0, out.output
    assert seen[0].build.security_refresh and seen[0].test is not None
    assert "security-refresh: the rebuilt images are tested (as --test)" in out.output
    out = CliRunner().invoke(cli, ["build", "--matrix", "images/cpu.yaml"], standalone_mode=False)
    assert not seen[1].build.security_refresh and seen[1].test is None


def _locked_cpu_built(index, tmp_path):
    """images/cpu.yaml with the fake locker's lock (ca-certificates pinned at 1.0-1 in base), built as the record
    says: base with ca-certificates 1.0-1 and an old libssl3 (both behind bookworm-security), runtime and dev current."""
    from _lock_support import INPUTS, cpu_with_lock

    from imagebuild.pipeline.loaded import load
    from imagebuild.record import updating

    indexes, real = index
    matrix, _, lock = cpu_with_lock(tmp_path)
    state = tmp_path / "state"
    plan = load(str(matrix), None, INPUTS, str(state), print, building=True).plan  # with its lock
    assert plan.lock_file
    base = plan.images[0]
    assert lock.images[base.id].apt["ca-certificates"] == "1.0-1"
    ssl = stanzas_of(packages_text(real, indexes), {"libssl3"})
    stale_status = status_file(ssl, {"libssl3": OLD_SSL}) + \
        "\nPackage: ca-certificates\nStatus: install ok installed\nVersion: 1.0-1\nArchitecture: all\n"
    engine = FakeEngine()
    with updating(matrix, INPUTS, None, directory=state, replace_inputs=True) as rec:
        for img in plan.images:
            iid = engine.add_image(img.tag, {INPUTS_LABEL: img.inputs_hash}, Architecture="amd64")
            rec.images[img.id] = ImageRecord(img.id, img.flavor, img.inputs_hash, image_id=iid, status="built")
            engine.filesystems[iid] = tar_of({
                "etc/os-release": 'ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n',
                "var/lib/dpkg/status": stale_status if img.flavor == "base" else status_file(ssl, {})})
    return matrix, lock, plan, engine, state


def test_apply_refresh_under_a_lock_rewrites_its_pins_and_plans_with_them(index, tmp_path, monkeypatch):
    """pipeline.staleness.apply_refresh on images/cpu.yaml with a lock (the fake locker's: ca-certificates pinned at
    1.0-1 in base): the base's ca-certificates and libssl3 are behind bookworm-security; the lock file is rewritten
    with ca-certificates at the fixed version (sealed), the new plan installs it pinned and upgrades both by name."""
    from _lock_support import INPUTS

    import imagebuild.engine
    from imagebuild.lock import load as load_lock
    from imagebuild.lock import lock_path
    from imagebuild.pipeline.loaded import load
    from imagebuild.pipeline.staleness import apply_refresh

    indexes, real = index
    matrix, lock, plan, engine, state = _locked_cpu_built(index, tmp_path)
    base = plan.images[0]
    monkeypatch.setattr(imagebuild.engine, "connect", lambda *a, **k: engine)
    said: list[str] = []
    loaded = load(str(matrix), None, INPUTS, str(state), said.append, building=True)
    assert [i.inputs_hash for i in loaded.plan.images] == [i.inputs_hash for i in plan.images]
    lock_before = lock_path(matrix).read_text()

    refreshed, refresh = apply_refresh(loaded, loaded.plan.images, None, str(state), said.append, indexes)
    ca, ssl_fixed = real.binaries["ca-certificates"].version, real.binaries["libssl3"].version
    assert set(refresh.stale) == {base.id} and len(refresh.stale[base.id].fixes) == 2
    assert f"security-refresh: {lock_path(matrix)}: 1 pin(s) raised to the fixed versions ({base.id}: " \
           f"ca-certificates 1.0-1→{ca})" in said
    written = load_lock(lock_path(matrix))
    assert written.seal == "ok" and written.images[base.id].apt["ca-certificates"] == ca
    assert {k: v for k, v in written.images.items() if k != base.id} == \
        {k: v for k, v in lock.images.items() if k != base.id}  # the other images' entries as they were
    dockerfile = refreshed.plan.images[0].dockerfile
    assert f"        'ca-certificates={ca}' \\" in dockerfile  # the raised pin, installed
    assert "--only-upgrade \\\n        ca-certificates \\\n        libssl3; \\" in dockerfile
    assert all(a.inputs_hash != b.inputs_hash for a, b in zip(plan.images, refreshed.plan.images, strict=True))
    assert refreshed.plan.lock_file and refreshed.inputs.refresh_for(base.id).upgrade == ("ca-certificates", "libssl3")
    assert f"libssl3={ssl_fixed}" not in dockerfile  # unpinned by the lock: upgraded by name, never a pin kept

    # the built images checked again (still the old ones: nothing was built here) while the lock already holds the
    # fix: the pin is not raised twice, and that is said
    said.clear()
    apply_refresh(load(str(matrix), None, INPUTS, str(state), said.append, building=True), plan.images, None,
                  str(state), said.append, indexes)
    assert f"security-refresh: {lock_path(matrix)} pins none of the fixed packages; unchanged" in said
    assert lock_path(matrix).read_text() != lock_before  # still the once-raised lock


def test_audit_of_a_locked_matrix_says_which_fix_needs_the_lock_raised(index, tmp_path, monkeypatch):
    import imagebuild.engine
    import imagebuild.pipeline.auditing as auditing

    indexes, real = index
    matrix, lock, plan, engine, state = _locked_cpu_built(index, tmp_path)
    monkeypatch.setattr(imagebuild.engine, "connect", lambda *a, **k: engine)
    monkeypatch.setattr(auditing, "SecurityIndexes", lambda tables: indexes)
    monkeypatch.delenv("IMAGEBUILD_OSV_DB", raising=False)
    run = auditing.audit_images([], str(matrix), str(state), None, False, lambda m: None)
    base = next(r for r in run.results if r.image == plan.images[0].tag)
    notes = {f.package: f.note for f in base.findings}
    ca = real.binaries["ca-certificates"].version
    assert notes["ca-certificates"].endswith(f"pinned in cpu.lock at 1.0-1: build --security-refresh raises the pin "
                                             f"to {ca}")
    assert "pinned" not in notes["libssl3"]  # not a lock pin: the refresh upgrades it in the apt step
    assert "pinned in cpu.lock at 1.0-1" in run.text
    assert all(r.findings == () for r in run.results if r is not base)
    alone = auditing.audit_images([plan.images[0].tag], None, str(state), None, False, lambda m: None)
    assert alone.results[0].findings and not any("pinned" in f.note for f in alone.results[0].findings)  # no lock


def test_a_binary_the_suite_no_longer_builds_counts_but_is_never_upgraded_or_pinned_by_name(index):
    """Matched by its source package, its 'fixed' version is the source's: `apt-get install X=<source version>`
    would fail the build, and a lock pin raised to it would name a version that does not exist."""
    from imagebuild.audit.os import Installed
    from imagebuild.audit.stale import staleness

    indexes, real = index
    gone = Installed("libssl1.9-imaginary", OLD_SSL, "amd64", "openssl", "")
    ssl = Installed("libssl3", OLD_SSL, "amd64", "openssl", "")
    s = staleness("debian", "bookworm", "amd64", [gone, ssl], indexes)
    assert s.state == STALE and len(s.fixes) == 2 and s.upgradable == ("libssl3",)
    plan = _plan()
    base = plan.images[0].id
    refresh = plan_refresh(plan, BuildInputs(), {base: s})
    assert refresh.inputs.refresh_for(base).upgrade == ("libssl3",)
    assert refresh.fixed_versions() == {base: {"libssl3": real.binaries["libssl3"].version}}  # what a lock gets
    assert "libssl1.9-imaginary" in refresh.reasons[base]  # counted and named in the reason all the same
