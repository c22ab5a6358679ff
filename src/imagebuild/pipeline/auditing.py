"""`imagebuild audit`'s run: which images (--image REFs; a matrix's planned images the engine holds), each image's
inventory (the files kept once per image ID beside the record: keptfiles.local_inventory), the OS half against the
security suite (audit/os.py) and the Python half against the OSV database (audit/python.py), each index and database
read once per run, judged by the matrix's `audit:` policy (audit/policy.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.audit.debian import SecurityIndexes, urllib_fetch
from imagebuild.audit.model import NOT_CHECKED, AuditResult, SourceStatus
from imagebuild.audit.os import Changelogs, Installed, audit_os
from imagebuild.audit.policy import DEFAULT, exit_code, judge_all
from imagebuild.audit.python import PyPIAdvisories, audit_python, open_osv
from imagebuild.audit.python import urllib_fetch as pypi_fetch
from imagebuild.audit.report import format_text, merge, to_json
from imagebuild.audit.stale import lock_notes
from imagebuild.errors import ImagebuildError, MatrixError
from imagebuild.inventory.model import Inventory
from imagebuild.matrix.audit import AuditPolicy

if TYPE_CHECKING:
    from imagebuild.sign.keys import PublicKey

Say = Callable[[str], None]
_REGISTRY = "\0registry"  # a target read from its registry's attested SBOM (pipeline/sbom_audit.py)


@dataclass
class AuditRun:
    results: list[AuditResult] = field(default_factory=list)
    json: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""
    exit_code: int = 0


def _policy(matrix: str) -> AuditPolicy:
    # the rest of the matrix is the plan's to report; an allowance problem stops the audit here
    return matrix_policy(matrix) or DEFAULT


def _targets(images: list[str], matrix: str | None, state_dir: str | None, client: Any, say: Say,
             pins: dict[str, tuple[str, dict[str, str]]] | None = None) -> list[tuple[str, str | None, str]]:
    """(what to call it, local image ID or None, why not) for each image to audit; `pins` gets each planned image's
    lock name and apt pins when the matrix has a lock."""
    from imagebuild.inventory import find_image

    out: list[tuple[str, str | None, str]] = []
    for ref in images:
        info = find_image(client, ref)
        out.append((ref, str(info["Id"]) if info else None, "" if info else
                    f"no image {ref!r} in the local engine (to audit a pushed tag by its attested SBOM: "
                    f"--image docker://REGISTRY/REPO:TAG)"))
    if matrix and not images:
        from imagebuild.pipeline.loaded import load
        from imagebuild.pipeline.located import locate

        loaded = load(matrix, None, None, state_dir, say)
        for img in loaded.plan.images:
            where = locate(client, img, loaded.record)
            out.append((img.tag or img.id, where.image_id, where.why))
        if loaded.plan.lock_file and pins is not None:  # what the lock pins per image (its findings say so)
            from imagebuild.lock import load as load_lock

            lock = load_lock(loaded.plan.lock_file)
            pins.update({img.tag or img.id: (Path(lock.path).name, dict(lock.images[img.id].apt))
                         for img in loaded.plan.images if img.id in lock.images})
    return out


def audit_inventory(name: str, image_id: str, inv: Inventory, indexes: SecurityIndexes, logs: Changelogs,
                    osv_db: Any, pypi_advisories: PyPIAdvisories | None,
                    pins: tuple[str, dict[str, str]] | None = None,
                    first: tuple[SourceStatus, ...] = ()) -> AuditResult:
    """One inventory's audit, whichever way it was read (a local image's files, a pushed digest's SBOM): the OS half
    against the security suite, the Python half against OSV (and PyPI); `first`: statuses said before both (the
    SBOM's)."""
    rel = inv.os_release
    debs = [Installed(d.name, d.version, d.architecture, d.source, d.source_version) for d in inv.debs]
    os_part = audit_os(rel.id, rel.codename, inv.architecture or "amd64", debs, indexes, logs)
    if pins is not None:  # a locked image: a fix for a pinned package needs the lock raised
        os_part = replace(os_part, findings=lock_notes(os_part.findings, pins[1], pins[0]))
    py_part = audit_python([(p.name, p.version) for p in inv.pythons], osv_db, pypi_advisories)
    result = merge(name, image_id, os_part, py_part)
    return replace(result, sources=(*first, *result.sources)) if first else result


def audit_images(images: list[str], matrix: str | None, state_dir: str | None, osv: str | None,
                 changelogs: bool, say: Say, pypi: bool = False, *, verify_key: PublicKey | None = None,
                 ca_file: str | None = None, platform: str | None = None) -> AuditRun:
    """`images`: local tags/IDs; `docker://REF` (or HOST[:PORT]/REPO:TAG that the engine does not hold) is a pushed
    image audited by its attested SBOM (pipeline/sbom_audit.py), checked with `verify_key` when given."""
    from imagebuild.compat import load as load_tables
    from imagebuild.pipeline.keptfiles import local_inventory
    from imagebuild.pipeline.sbom_audit import is_registry_audit, registry_inventory
    from imagebuild.record.derived import Derived

    policy = _policy(matrix) if matrix else DEFAULT
    tables = load_tables()
    client: Any = None
    engine_refs = [ref for ref in images if not ref.startswith("docker://")]
    if engine_refs or (matrix and not images):
        from imagebuild.engine import connect
        from imagebuild.errors import EngineUnavailable

        try:
            client = connect("inspect")
        except EngineUnavailable:  # no engine: fine when every image names its registry (read from there)
            if (matrix and not images) or not all(is_registry_audit(ref, None) for ref in engine_refs):
                raise
    kept = Derived(state_dir, say)
    indexes = SecurityIndexes(tables)
    logs = Changelogs(urllib_fetch if changelogs else None)
    osv_db = open_osv(osv)
    pypi_advisories = PyPIAdvisories(pypi_fetch()) if pypi else None  # each project asked once per run
    run = AuditRun()
    judged_all: list[Any] = []
    pins: dict[str, tuple[str, dict[str, str]]] = {}
    targets: list[tuple[str, str | None, str]] = []
    for ref in images:  # in the order given: a registry reference is read from its SBOM, anything else locally
        targets += [(ref, None, _REGISTRY)] if is_registry_audit(ref, client) else \
            _targets([ref], None, state_dir, client, say, pins)
    if matrix and not images:
        targets = _targets([], matrix, state_dir, client, say, pins)
    for name, image_id, why in targets:
        if image_id is None and why == _REGISTRY:
            read = registry_inventory(name, tables, verify_key=verify_key, ca_file=ca_file, platform=platform,
                                      say=say)
            result = audit_inventory(name, read.digest, read.inventory, indexes, logs, osv_db, pypi_advisories,
                                     first=(read.status,))
        elif image_id is None:
            result = AuditResult(name, "", (SourceStatus("image", NOT_CHECKED, why),))
        else:
            inv: Inventory = local_inventory(client, kept, image_id)
            result = audit_inventory(name, image_id, inv, indexes, logs, osv_db, pypi_advisories, pins.get(name))
        _add(run, judged_all, result, policy)
    run.exit_code = exit_code(judged_all)
    if matrix and not images:
        keep_results(matrix, state_dir, run, say)
    return run


def _add(run: AuditRun, judged_all: list[Any], result: AuditResult, policy: AuditPolicy) -> None:
    judged = judge_all(result, policy)
    judged_all.append((result, judged))
    run.results.append(result)
    run.json.append(to_json(result, judged))
    run.text += format_text(result, judged)


def matrix_policy(matrix: str) -> AuditPolicy | None:
    """The matrix's own `audit:` policy, None when it has none (a problem in it: MatrixError, one line each)."""
    from imagebuild.matrix import load_matrix
    from imagebuild.pipeline.settings import resolve_matrix_path

    doc = load_matrix(resolve_matrix_path(matrix))
    problems = [p for p in doc.problems if p.keypath.startswith("audit")]
    if problems:
        raise MatrixError(problems)
    return doc.audit


def audit_gate(client: Any, built: list[tuple[str, str]], policy: AuditPolicy, state_dir: str | None,
               say: Say) -> AuditRun:
    """`build --test` under a matrix's `audit:` policy: each built image, by the image ID the build reported
    (`built`: (tag, image ID)), audited as `imagebuild audit` audits it (its kept inventory, the signed security
    suite; no OSV database here, so the Python half says NOT CHECKED), judged by the policy. The caller fails the
    build on a violation (exit 1); the results are kept in the record under each image ID (the report counts)."""
    from imagebuild.compat import load as load_tables
    from imagebuild.pipeline.keptfiles import local_inventory
    from imagebuild.record.derived import Derived

    kept = Derived(state_dir, say)
    indexes = SecurityIndexes(load_tables())
    logs = Changelogs(None)
    osv_db = open_osv(None)
    run = AuditRun()
    judged_all: list[Any] = []
    for tag, image_id in built:
        inv = local_inventory(client, kept, image_id)
        _add(run, judged_all, audit_inventory(tag, image_id, inv, indexes, logs, osv_db, None), policy)
    run.exit_code = exit_code(judged_all)
    return run


def keep_results(matrix: str, state_dir: str | None, run: AuditRun, say: Say, refresh_report: bool = True) -> None:
    """Each audited image's result into the matrix's record, under the image ID it audited (record/audits.py), so
    the build report, the catalog and a signed push show it for exactly that image. No trusted record: not kept.
    `refresh_report`: the counts into the matrix's default report too (not when a build writes its own next)."""
    from imagebuild import __version__
    from imagebuild.pipeline.settings import resolve_matrix_path
    from imagebuild.record import load_record, now, updating
    from imagebuild.record.audits import audit_entry

    path = resolve_matrix_path(matrix)
    found = load_record(path, state_dir)
    if found is None or found.problem:
        say(f"warning: {path}: the audit results are not kept (no trusted record of this matrix: build it first)")
        return
    at = now()
    entries = [audit_entry(doc, at, __version__) for doc in run.json if doc.get("image_id")]
    if not entries:
        return
    with updating(path, directory=state_dir) as rec:
        for entry in entries:
            rec.audits[entry["image_id"]] = entry
    if not refresh_report:
        return
    from imagebuild.pipeline.settings import default_report_dir
    from imagebuild.record.audits import audit_summary
    from imagebuild.report import refresh_audits

    summaries = {e["image_id"]: audit_summary({e["image_id"]: e}, e["image_id"]) or {} for e in entries}
    report_dir = default_report_dir(path)
    try:
        if refresh_audits(report_dir, summaries):
            say(f"audit: the counts are in {report_dir / 'build-report.md'}")
    except (OSError, ImagebuildError) as exc:  # a damaged or read-only report: the record keeps the results
        say(f"warning: {report_dir}: the report's audit counts not refreshed ({exc})")
