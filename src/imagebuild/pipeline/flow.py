"""The three runs of the pipeline, each from ONE RunOptions over ONE Loaded (plan + record):

    build_run: build -> SBOM/diff -> record -> [test] -> [push] -> report
    test_run:  locate -> test -> report
    push_run:  locate -> push -> report   (or a dry run: what would go where)

Each returns a RunResult; the command turns `ok` into the exit code. Output: `say` (stderr) for progress and notes,
`show` (stdout) for what the user asked to see (the build summary is the builder's own).

The steps a run does not take are imported where they start (build: the builder and its backends; test: smoke's
runner; push: push, sign, the layer limit), so a build without --test/--push, above all the whole-process no-op,
does not load them, and a push (a first signed push is seconds) loads no builder."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild import __version__, engine
from imagebuild.engine.store import as_store
from imagebuild.errors import UsageError
from imagebuild.files import check_output_dir
from imagebuild.models import ImagePlan, ImageResult
from imagebuild.phases import Phase
from imagebuild.pipeline.loaded import Loaded, Say, load
from imagebuild.pipeline.located import Located, locate, plan_registry
from imagebuild.pipeline.selection import select_images
from imagebuild.pipeline.settings import (
    RunOptions,
    Step,
    TestSettings,
    check_inputs,
    default_report_dir,
    require_lock,
    resolve_matrix_path,
)
from imagebuild.record import now
from imagebuild.record.derived import Derived
from imagebuild.record.store import state_dir as record_state_dir
from imagebuild.record.update import fill_row, record_build
from imagebuild.report import write_reports

if TYPE_CHECKING:
    from imagebuild.pipeline.pushing import PushRun
    from imagebuild.pipeline.testing import TestedImage


@dataclass
class RunResult:
    steps: list[Step]
    results: list[ImageResult] = field(default_factory=list)  # the report's rows
    tested: list[TestedImage] = field(default_factory=list)
    pushed: PushRun | None = None
    report_md: Path | None = None
    ok: bool = True
    rows: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (image, tests) for the test summary


def _report(options: RunOptions, loaded: Loaded, result: RunResult, started: str) -> None:
    report_dir = options.report_dir or default_report_dir(loaded.path)
    paths = write_reports(result.results, report_dir, loaded.plan, run={
        "command": options.command.value, "steps": [s.value for s in result.steps],
        "registry": plan_registry(loaded.plan), "started": started, "tool_version": __version__})
    result.report_md = paths["md"]


def _check_outputs(options: RunOptions, loaded: Loaded, log_dir: Path | None = None) -> Path:
    """Every folder this run writes is checked before anything builds, tests or pushes (not after an hour);
    returns the report folder."""
    report_dir = check_output_dir(options.report_dir or default_report_dir(loaded.path), "--report-dir")
    if log_dir is not None:
        check_output_dir(log_dir, "--log-dir")
    check_output_dir(record_state_dir(options.state_dir), "--state-dir")
    return report_dir


def _located(client: Any, images: list[ImagePlan], loaded: Loaded) -> list[tuple[ImagePlan, Located]]:
    return [(img, locate(client, img, loaded.record)) for img in images]


def _summary(tested: list[TestedImage]) -> str:
    from imagebuild.smoke import runner

    return runner.summary_table([(t.image.tag, t.tests) for t in tested])


def _recorded(rec: Any, plan: Any, results: list[ImageResult], refresh: Any) -> None:
    """record_build, and each built image's `rebuilt_because`: the refresh's reason, else none."""
    record_build(rec, plan, results)
    if refresh is not None:
        from imagebuild.pipeline.staleness import mark_rebuilt

        mark_rebuilt(rec, plan, results, refresh)
        return
    by_tag = plan.by_tag()
    for res in results:  # built for changed inputs (or --force): an earlier refresh's reason is not this build's
        img = by_tag.get(res.tag)
        if res.status == "built" and img is not None and img.id in rec.images:
            rec.images[img.id].rebuilt_because = None


def _test_phase(tested: TestedImage) -> list[Phase]:
    """The smoke tests as a phase of the image's report row: the suite's seconds, a reused pass 0 s (cached)."""
    from imagebuild.pipeline.testing import TestOutcome

    if tested.outcome == TestOutcome.UP_TO_DATE:
        return [Phase("tests", "the recorded pass of this content (up to date)", 0.0, cached=True)]
    seconds = tested.tests.get("seconds")
    if tested.outcome != TestOutcome.RAN or isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return []
    return [Phase("tests", "the smoke suite", float(seconds), cached=False)]


def build_run(options: RunOptions, say: Say, show: Say) -> RunResult:
    """`build`: every selected image (and the parents it needs), then the steps asked for."""
    settings = options.build
    assert settings is not None and options.inputs is not None
    from imagebuild.builder import make_progress
    from imagebuild.pipeline.building import (
        backend_maker,
        build_step,
        chosen_backend,
        concrete_backend,
        finish,
        platform_preflight,
    )
    from imagebuild.pipeline.supply import diff_rebuilds, previous_ids, write_sboms

    started = now()
    check_inputs(options.inputs)
    if settings.locked:
        require_lock(options.matrix, resolve_matrix_path(options.matrix))
    # auto: which backend and why, said once the engine answered (no engine: its own one line, nothing before it;
    # a bad matrix or lock: exit 2 first, as without auto)
    auto_lines: list[str] = []
    inputs = concrete_backend(resolve_matrix_path(options.matrix), options.inputs, settings, auto_lines.append)
    loaded = load(options.matrix, options.registry, inputs, options.state_dir, say, building=True)
    plan = loaded.plan
    selection = select_images(plan, options.only, loaded.path)
    report_dir = _check_outputs(options, loaded, settings.log_dir)
    if options.push is not None:
        from imagebuild.pipeline.signing import open_signing_key

        open_signing_key(options.push, selection.named)  # a key that cannot sign: said before an hour of building
    backend, own = chosen_backend(plan, loaded.inputs, settings)  # another backend's options: refused here
    # its timeout also fits --push of multi-GB layers; lazy: the SDK only once something but the image store's
    # questions is asked (a run whose images are all up to date never loads it)
    client = engine.connect("build", lazy=True)
    for line in auto_lines:
        say(line)
    refresh = None
    if settings.security_refresh:  # the stale images' apt steps carry the index they saw: they and their children
        from imagebuild.pipeline.staleness import apply_refresh

        loaded, refresh = apply_refresh(loaded, selection.with_parents, options.registry, options.state_dir, say)
        plan, selection = loaded.plan, select_images(loaded.plan, options.only, loaded.path)
    platform_preflight(client, selection.with_parents, backend, own)  # before anything builds
    progress = make_progress(plain=settings.plain, verbose=settings.verbose)
    before = previous_ids(client, selection.with_parents) if settings.sbom else {}
    kept = Derived(options.state_dir, say)  # what was read out of each image before, by image ID
    built = build_step(client, plan, selection, settings, loaded.record, progress,
                       settings.log_dir or (report_dir / "logs"), say,
                       (backend, backend_maker(backend, own, as_store(client))), kept)  # preflight unless all here
    if settings.sbom:
        rec = loaded.record
        recorded = {k: v.sbom for k, v in (rec.images if rec else {}).items() if v.sbom}
        write_sboms(client, plan, built.results, report_dir, recorded, kept, say)
        diff_rebuilds(client, plan, built.results, before, kept, say)
    loaded.book.update(lambda rec: _recorded(rec, plan, built.results, refresh), inputs=loaded.inputs,
                       registry=options.registry, replace_inputs=True)
    if refresh is not None and refresh.stale:  # what each refreshed image still lacks: checked, recorded
        from imagebuild.pipeline.staleness import check_after, mark_rebuilt

        after = check_after(loaded, refresh, built.results, options.state_dir, say)
        loaded.book.update(lambda rec: mark_rebuilt(rec, plan, built.results, refresh, after))
    progress.summary(built.results)
    finish(built, plan)
    result = RunResult([Step.BUILD], built.results, ok=built.ok)
    by_tag = built.by_tag()
    ready = [(img, Located(by_tag[img.tag].image_id, "no image ID")) for img in built.ready]
    if options.test is not None and ready and (built.ok or settings.keep_going):
        from imagebuild.pipeline.testing import test_step

        result.steps.append(Step.TEST)
        test_settings = replace(options.test, junit_dir=options.test.junit_dir or report_dir / "junit",
                                result_dir=options.test.result_dir or report_dir / "tests")
        result.tested = test_step(client, ready, loaded.book, test_settings, say)
        for t in result.tested:
            by_tag[t.image.tag].tests = t.tests
            by_tag[t.image.tag].phases += _test_phase(t)
        show(_summary(result.tested))
        result.ok = result.ok and not any(t.failed for t in result.tested)
        if result.ok:
            result.ok = _audit_gate(client, ready, options, say)
    if options.push is not None and result.ok:
        from imagebuild.pipeline.layers import LayerLimitError
        from imagebuild.pipeline.pushing import push_step

        result.steps.append(Step.PUSH)
        try:
            result.pushed = push_step(client, plan, ready, loaded.book, options.push, say)
        except LayerLimitError:  # the build's report is still written; the refusal is the run's one error line
            result.ok = False
            _report(options, loaded, result, started)
            raise
        for res in result.pushed.results:
            by_tag[res.tag].push = res.push
        result.ok = result.ok and not result.pushed.failed
    _report(options, loaded, result, started)
    return result


def _audit_gate(client: Any, ready: list[tuple[ImagePlan, Located]], options: RunOptions, say: Say) -> bool:
    """`build --test` under the matrix's `audit:` policy: the built images audited (pipeline/auditing.audit_gate),
    the results kept in the record; False on a violation (the build exits 1). A matrix without `audit:` has no
    gate here (`imagebuild audit` judges it by the default policy)."""
    from imagebuild.audit.policy import EXIT_NOT_CHECKED, EXIT_VIOLATION
    from imagebuild.pipeline.auditing import audit_gate, keep_results, matrix_policy

    policy = matrix_policy(options.matrix)
    if policy is None:
        return True
    run = audit_gate(client, [(img.tag, where.image_id) for img, where in ready if where.image_id], policy,
                     options.state_dir, say)
    for line in run.text.splitlines():
        say(f"audit: {line}")
    keep_results(options.matrix, options.state_dir, run, say, refresh_report=False)
    violations = sum(1 for doc in run.json for f in doc.get("findings") or () if f.get("violates"))
    if run.exit_code == EXIT_VIOLATION:
        say(f"audit: {violations} finding(s) violate the audit policy of {options.matrix} (its `audit:` key): "
            "the build fails (exit 1); fix or allow them (allow: [{id, reason, expires}])")
        return False
    say("audit: no finding violates the matrix's audit policy" + (
        "; some sources were NOT CHECKED (above): not a clean bill" if run.exit_code == EXIT_NOT_CHECKED else ""))
    return True


def test_run(options: RunOptions, say: Say) -> RunResult:
    """`test --matrix`: the planned images the record (or the engine's labels) holds, by image ID."""
    from imagebuild.pipeline.testing import test_step
    from imagebuild.smoke import runner

    settings = options.test
    assert settings is not None
    started = now()
    client = runner.docker_client()
    loaded = load(options.matrix, options.registry, None, options.state_dir, say)
    _check_outputs(options, loaded)
    images = _located(client, select_images(loaded.plan, options.only, loaded.path).named, loaded)
    result = RunResult([Step.TEST])
    result.tested = test_step(client, images, loaded.book, settings, None if settings.quiet else say)
    for t in result.tested:
        row = fill_row(loaded.record, t.image, ImageResult.of(t.image))
        row.image_id, row.tests = t.image_id or row.image_id, t.tests
        row.phases = _test_phase(t)
        result.results.append(row)
        result.rows.append((t.image.tag, t.tests))
    result.ok = not any(t.failed for t in result.tested)
    _report(options, loaded, result, started)
    return result


test_run.__test__ = False  # type: ignore[attr-defined]  # not a pytest test despite the name


def test_image(ref: str, flavor: str | None, settings: TestSettings, say: Say) -> RunResult:
    """`test --image`: the suite in one image someone already has (no plan, no record, no report)."""
    from imagebuild.smoke import runner

    tests = runner.run_smoke(ref, flavor, dict(settings.expect), client=runner.docker_client(),
                             require_gpu=settings.require_gpu, perf=settings.perf, junit_dir=settings.junit_dir,
                             result_dir=settings.result_dir, timeout=settings.timeout,
                             echo=None if settings.quiet else say, sections=settings.sections)
    return RunResult([Step.TEST], ok=not tests.get("failed"), rows=[(ref, tests)])


test_image.__test__ = False  # type: ignore[attr-defined]


def push_run(options: RunOptions, say: Say, show: Say) -> RunResult:
    """`push --matrix`: the planned images this engine holds, tested (unless --untested), to their registry."""
    from imagebuild.pipeline.pushing import push_step

    settings = options.push
    assert settings is not None
    started = now()
    loaded = load(options.matrix, options.registry, None, options.state_dir, say)
    _check_outputs(options, loaded)
    plan = loaded.plan
    chosen = select_images(plan, options.only, loaded.path).named
    signing = None
    if settings.dry_run:  # the key and its password, checked as the push would (it checks them itself)
        from imagebuild.pipeline.signing import open_signing_key

        signing = open_signing_key(settings, chosen)
    client = engine.connect("push")
    images = _located(client, chosen, loaded)
    if settings.dry_run:
        _dry_run(images, loaded, settings.require_tests, show)
        if signing is not None:
            show(f"dry run: would sign with {signing[0].describe()} (the key opens with its password)")
        return RunResult([Step.PUSH])
    pushed = push_step(client, plan, images, loaded.book, settings, say, describe_credentials=True)
    from imagebuild.pipeline.cached import recorded_tests  # the smoke runner: not on the no-op build's path

    for res in pushed.results:
        image = plan.by_tag()[res.tag]
        fill_row(loaded.record, image, res)
        # the report keeps what the gate read: the recorded test result of this very image (a push report without
        # it would say "not tested" of a tested image)
        hit = pushed.gate[res.tag].tests if res.tag in pushed.gate else None
        if hit is not None and res.image_id:
            res.tests = recorded_tests(hit, res.image_id, image.flavor, str(hit.get("where") or "cpu"))
    result = RunResult([Step.PUSH], pushed.results, pushed=pushed, ok=not pushed.not_pushed)
    _report(options, loaded, result, started)
    say(f"push: {len(pushed.results) - pushed.not_pushed} ok, {pushed.not_pushed} not pushed; "
        f"report {result.report_md}")
    return result


def _dry_run(images: list[tuple[ImagePlan, Located]], loaded: Loaded, require_tests: bool, show: Say) -> None:
    from imagebuild.oci import Reference, ReferenceSyntaxError
    from imagebuild.pipeline.pushing import gate_reason, gate_rows
    from imagebuild.plan.tags import references

    rows = gate_rows(images, loaded.record)
    for image, _ in images:
        reason = gate_reason(image, rows[image.tag], require_tests)
        try:
            refs = [Reference.parse(ref) for ref in references(image)]
        except ReferenceSyntaxError as exc:
            raise UsageError(f"{image.tag}: {exc}") from None
        show(f"{image.tag}" + (f"  (not pushed: {reason})" if reason else ""))
        for ref in refs[1:]:
            show(f"    + alias {ref.tag}")
        show(f"    -> {refs[0].registry}")
    show(f"dry run: {len(images)} image(s); nothing pushed")



def summary_table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """The test summary (one row per image, a line per failed check) the commands print."""
    from imagebuild.smoke import runner

    return runner.summary_table(rows)
