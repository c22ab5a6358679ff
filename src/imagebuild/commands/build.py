"""`imagebuild build`: build every planned image through the Docker engine, in dependency order."""

from __future__ import annotations

from pathlib import Path

import click

from imagebuild.commands._options import (
    build_input_options,
    default_report_dir,
    matrix_option,
    only_option,
    registry_option,
    resolve_matrix_path,
    state_dir_option,
)
from imagebuild.errors import EXIT_FAILED, EXIT_OK, UsageError


def _say(msg: str) -> None:
    click.echo(msg, err=True)


@click.command("build")
@matrix_option
@registry_option
@build_input_options
@only_option
@click.option("--force", is_flag=True, help="Rebuild even when an image with the same inputs hash exists.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Independent images built in parallel (default: chosen for this machine).")
@click.option("--keep-going", "-k", is_flag=True,
              help="After a failure, finish the images that do not depend on it.")
@click.option("--plain", is_flag=True, help="One line per event instead of the live view (default without a TTY).")
@click.option("--verbose", "-v", is_flag=True, help="Stream the build output.")
@click.option("--log-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Full build logs (credentials redacted), one file per image (default: <report dir>/logs).")
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where this run's build-report.json/.md/junit.xml go (default: reports/<matrix>/).")
@state_dir_option
@click.option("--test", "run_tests", is_flag=True,
              help="Smoke-test the images afterwards (an image that already passed this suite is up to date).")
@click.option("--retest", is_flag=True, help="With --test: run the suite even where it already passed.")
@click.option("--created", metavar="now|DATE", callback=lambda ctx, param, value: check_created(value),
              help="The org.opencontainers.image.created label: 'now' (the build time) or an RFC 3339 date. "
                   "Default: the source date (SOURCE_DATE_EPOCH, else the OS base image's date), so an unchanged "
                   "rebuild gives the same image. A rebuild whose content equals the image its tag named before "
                   "keeps that image, and its date.")
@click.option("--push", "run_push", is_flag=True, help="Push the built (and tested) images afterwards.")
@click.option("--registry-cache/--no-registry-cache", "registry_cache", default=True, show_default=True,
              help="Ask the registry first: an image it holds with the planned inputs hash is up to date there "
                   "(not built; pulled by digest only when a child must be built on it).")
@click.option("--require-registry", is_flag=True,
              help="A registry that does not answer or refuses the credentials is an error, not a local build.")
@click.option("--sbom/--no-sbom", "sbom", default=True, show_default=True,
              help="Write a CycloneDX SBOM per image beside the report (reports/<matrix>/sbom/), its digest in the "
                   "report; a rebuild's report also shows the diff against the image the tag pointed at before.")
@click.option("--builder", "buildx_builder", metavar="NAME", default=None,
              help="With --backend buildkit: the buildx builder (default: buildx's current one, the engine's).")
@click.option("--buildkit-cache", "buildkit_cache", metavar="REPOSITORY", default=None,
              help="With the buildkit backend: import and export a registry cache of every stage, one tag per image "
                   "(REPOSITORY:<image tag>), so a fresh runner rebuilds a changed image from its unchanged stages.")
@click.option("--locked", is_flag=True,
              help="Refuse to build (exit 2) unless the matrix's lock (images/X.lock) exists and fits the matrix. "
                   "Without it an existing lock is used too; a missing one means an unlocked build.")
def command(matrix, registry, inputs, only, force, jobs, keep_going, plain, verbose, log_dir, report_dir,
            state_dir, run_tests, retest, run_push, registry_cache, require_registry, sbom, buildx_builder, buildkit_cache, locked,
            created):
    """Build the matrix's images: parents once, children FROM the parent's image ID, unchanged images skipped.

    \b
    Example:
      imagebuild build --matrix images/cpu.yaml --wheelhouse /opt/wheels
      imagebuild build --matrix h100.yaml --only '*2.9.1*runtime' --jobs 2 --plain
      imagebuild build --matrix images/cpu.yaml --ca-cert corp-ca.pem --pip-index-url https://u:p@pypi.corp/simple
    """
    from imagebuild import __version__
    from imagebuild.builder import BuildOptions, build_plan, make_progress
    from imagebuild.commands._state import plan_registry
    from imagebuild.commands._supply import diff_rebuilds, previous_ids, write_sboms
    from imagebuild.engine import connect
    from imagebuild.record import load_record, now, updating
    from imagebuild.record.update import record_build
    from imagebuild.render import plan_backend

    started = now()
    check_inputs(inputs)
    path = resolve_matrix_path(matrix)
    if locked:
        require_lock(matrix)
    plan = load_plan(path, inputs, registry)  # a lock that does not fit the matrix: LockError (exit 2)
    report_dir = report_dir or default_report_dir(path)
    log_dir = log_dir or (report_dir / "logs")
    rec = load_record(path, state_dir)
    if rec is not None and rec.problem:
        click.echo(f"warning: {rec.problem}", err=True)
        rec = None
    elif rec is not None and rec.inputs != inputs.public():
        click.echo(f"note: {rec.path} recorded a build with other inputs ({rec.describe_inputs()}); this build "
                   "records its own", err=True)
    client = connect("build")  # its timeout also fits --push of multi-GB layers
    build_backend = None
    if plan_backend(plan, inputs) == "buildkit" or buildx_builder or buildkit_cache:
        from imagebuild.builder.buildx_preflight import preflight as buildx_preflight

        build_backend = buildx_preflight(buildx_builder, buildkit_cache)  # one error line before anything builds
    say = _say
    remote = {}
    if registry_cache and not force:
        remote = registry_lookup(plan, tuple(only), require_registry, say)
    buildable, blocked = preflight_sources(client, plan, tuple(only), keep_going, rec=rec, force=force,
                                           remote=remote)
    progress = make_progress(plain=plain, verbose=verbose)
    options = BuildOptions(force=force, only=tuple(only), keep_going=keep_going, log_dir=log_dir, remote=remote,
                           created=created)
    if jobs:
        options.jobs = jobs
    before = previous_ids(client, plan) if sbom else {}
    results = (build_plan(client, buildable, options, progress, backend=build_backend) if buildable.images else []) + blocked
    order = {img.tag: n for n, img in enumerate(plan.images)}
    results.sort(key=lambda r: order[r.tag])
    if sbom:
        recorded = {k: v.sbom for k, v in (rec.images if rec else {}).items() if v.sbom}
        write_sboms(client, plan, results, report_dir, recorded, say)
        diff_rebuilds(client, plan, results, before, say)
    with updating(path, inputs, registry, directory=state_dir, replace_inputs=True) as rec_w:
        record_build(rec_w, plan, results)
    progress.summary(results)
    ok = all(r.status in ("built", "up-to-date", "skipped") for r in results)

    by_tag = {r.tag: r for r in results}
    ready = [i for i in plan.images if by_tag[i.tag].status in ("built", "up-to-date")
             and not (by_tag[i.tag].source or "").startswith("registry")]
    steps = ["build"]
    if run_tests and ready and (ok or keep_going):
        steps.append("test")
        ok = smoke_test(client, ready, by_tag, report_dir, path, state_dir, retest) and ok
    if run_push and ok:
        steps.append("push")
        ok = push(client, plan, ready, by_tag, path, state_dir, require_tests=run_tests) and ok
    from imagebuild.report import write_reports

    paths = write_reports(results, report_dir, plan, run={
        "command": "build", "steps": steps, "registry": plan_registry(plan), "started": started,
        "tool_version": __version__})
    say(f"report: {paths['md']}")
    return EXIT_OK if ok else EXIT_FAILED


def registry_lookup(plan, only: tuple[str, ...], require: bool, say) -> dict:
    """--registry-cache: which planned images the registry already holds with exactly the planned inputs."""
    from imagebuild.builder.remote import RegistryUnavailable, find_in_registry
    from imagebuild.oci import resolve_auth
    from imagebuild.plan.assemble import select

    try:
        return find_in_registry(select(plan, only or None), resolve_auth, log=say)
    except RegistryUnavailable as exc:
        if require:
            raise SourcesUnreachable(f"{exc} (--require-registry)") from None
        say(f"registry cache: {exc}; building locally")
        return {}


def preflight_sources(client, plan, only: tuple[str, ...], keep_going: bool, rec=None, force: bool = False,
                      remote: dict | None = None):
    """Ask every outside source the selected images need before anything builds (builder.sources).

    Images whose source does not answer are named one line each; without --keep-going that stops the run (exit 1,
    nothing built), with it they and their children become failed/not-built rows and the rest is built."""
    from imagebuild.builder.sources import blocked_tags, unreachable
    from imagebuild.models import ImageResult, Plan
    from imagebuild.plan.assemble import select

    selected = select(plan, only or None)
    if not force:  # an image that is already here (or up to date in the registry) needs no outside source
        from imagebuild.commands._state import locate

        selected = [i for i in selected if i.tag not in (remote or {}) and locate(client, i, rec)[0] is None]

    def present(ref: str) -> bool:  # a registry base the engine already has needs no registry
        try:
            client.api.inspect_image(ref)
            return True
        except Exception:
            return False

    problems = unreachable(selected, present=present)
    if not problems:
        return plan, []
    for lines in problems.values():
        for line in lines:
            click.echo(f"error: {line}", err=True)
    blocked = blocked_tags(plan.images, problems)
    rest = [i for i in selected if i.tag not in blocked]
    if not keep_going:
        raise SourcesUnreachable(f"{len(problems)} image(s) need a source that does not answer (named above); "
                                 f"nothing was built. --keep-going builds the {len(rest)} other selected image(s)")
    rows = []  # one row for every blocked image of the plan, selected or not, so the report covers the whole plan
    chosen = {i.tag for i in selected}
    for img in plan.images:
        if img.tag in blocked:
            row = ImageResult.of(img)
            if img.tag in problems:
                row.status, row.error = "failed", "; ".join(problems[img.tag])
            elif img.tag in chosen:
                row.status, row.error = "not-built", f"parent {img.parent} not built"
            else:
                row.status = "skipped"
            rows.append(row)
    return Plan(plan.matrix_file, [i for i in plan.images if i.tag not in blocked]), rows


class SourcesUnreachable(UsageError):
    exit_code = EXIT_FAILED


def smoke_test(client, images, by_tag, report_dir: Path, matrix_path: Path, state_dir, retest: bool) -> bool:
    """--test: the smoke suite in every built/up-to-date image, by image ID (record-keyed: an image that already
    passed this suite is up to date); fills ImageResult.tests. False when a check failed."""
    from imagebuild.commands._testing import test_planned
    from imagebuild.smoke import runner

    todo = [(img, by_tag[img.tag].image_id, "no image ID") for img in images]
    rows = test_planned(client, todo, matrix_path, state_dir=state_dir, retest=retest,
                        junit_dir=Path(report_dir) / "junit", result_dir=Path(report_dir) / "tests",
                        echo=lambda m: click.echo(m, err=True))
    for img, tests in rows:
        by_tag[img.tag].tests = tests
    click.echo(runner.summary_table([(img.tag, tests) for img, tests in rows]))
    return not any(t.get("failed") for _, t in rows)


def push(client, plan, images, by_tag, matrix_path: Path, state_dir, require_tests: bool) -> bool:
    """--push: push built (and, with --test, tested) images; fills ImageResult.push. False when one failed."""
    from imagebuild.commands._pushing import push_located

    located = {img.tag: by_tag[img.tag].image_id for img in images}
    pushed = push_located(client, plan, images, located, matrix_path, state_dir, require_tests=require_tests,
                          log=lambda m: click.echo(m, err=True))
    for res in pushed:
        by_tag[res.tag].push = res.push
    return not any((r.push or {}).get("status") == "failed" for r in pushed)


def check_created(value: str | None) -> str | None:
    """--created: 'now' or an RFC 3339 date (what the OCI label holds); anything else is a usage error."""
    if value is None or value == "now":
        return value
    from imagebuild.builder.sourcedate import parse_created

    if parse_created(value) is None:
        raise UsageError(f"--created {value!r}: not 'now' nor an RFC 3339 date such as 2026-01-31T12:00:00Z")
    return value


def check_inputs(inputs) -> None:
    """Bad paths are input errors (exit 2) before anything is planned or built."""
    for ca in inputs.ca_certs:
        p = Path(ca)
        if not p.is_file():
            raise UsageError(f"--ca-cert {p}: no such file")
        try:
            head = p.read_bytes()[:1 << 16]
        except OSError as exc:
            raise UsageError(f"--ca-cert {p}: cannot read it ({exc.strerror})") from None
        if b"-----BEGIN CERTIFICATE-----" not in head:
            raise UsageError(f"--ca-cert {p}: not a PEM certificate (no '-----BEGIN CERTIFICATE-----' line)")
    if inputs.wheelhouse is not None and not Path(inputs.wheelhouse).is_dir():
        raise UsageError(f"--wheelhouse {inputs.wheelhouse}: no such folder")


def require_lock(matrix: str) -> None:
    """--locked: the lock must exist (make_plan then checks that it fits the matrix)."""
    from imagebuild.commands._options import resolve_matrix_path
    from imagebuild.lock import LockError, lock_path

    path = lock_path(resolve_matrix_path(matrix))
    if not path.is_file():
        raise LockError(f"--locked: {path} does not exist; `imagebuild lock --matrix {matrix}` writes it")


def load_plan(path, inputs, registry):
    from imagebuild.plan import make_plan

    return make_plan(path, inputs, registry)
