"""`imagebuild build`: build every planned image through the Docker engine, in dependency order."""

from __future__ import annotations

from pathlib import Path

import click

from imagebuild.commands._options import build_input_options, matrix_option, registry_option
from imagebuild.errors import EXIT_FAILED, EXIT_OK, UsageError


@click.command("build")
@matrix_option
@registry_option
@build_input_options
@click.option("--only", "only", multiple=True, metavar="PATTERN",
              help="Build only images whose tag, short tag or id matches (fnmatch); their parents come along. "
                   "Repeatable.")
@click.option("--force", is_flag=True, help="Rebuild even when an image with the same inputs hash exists.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Independent images built in parallel (default: chosen for this machine).")
@click.option("--keep-going", "-k", is_flag=True,
              help="After a failure, finish the images that do not depend on it.")
@click.option("--plain", is_flag=True, help="One line per event instead of the live view (default without a TTY).")
@click.option("--verbose", "-v", is_flag=True, help="Stream the build output.")
@click.option("--log-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/logs"),
              show_default=True, help="Full build logs (credentials redacted), one file per image.")
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"),
              show_default=True, help="Where build-report.json/.md go.")
@click.option("--created", metavar="now|DATE", callback=lambda ctx, param, value: check_created(value),
              help="The org.opencontainers.image.created label: 'now' (the build time) or an RFC 3339 date. "
                   "Default: the source date (SOURCE_DATE_EPOCH, else the OS base image's date), so an unchanged "
                   "rebuild gives the same image. A rebuild whose content equals the image its tag named before "
                   "keeps that image, and its date.")
@click.option("--test", "run_tests", is_flag=True, help="Run the smoke suite on the images afterwards.")
@click.option("--push", "run_push", is_flag=True, help="Push the built (and tested) images afterwards.")
def command(matrix, registry, inputs, only, force, jobs, keep_going, plain, verbose, log_dir, report_dir,
            created, run_tests, run_push):
    """Build the matrix's images: parents once, children FROM the parent's image ID, unchanged images skipped.

    \b
    Example:
      imagebuild build --matrix images/cpu.yaml --wheelhouse /opt/wheels
      imagebuild build --matrix h100.yaml --only '*2.9.1*runtime' --jobs 2 --plain
      imagebuild build --matrix images/cpu.yaml --ca-cert corp-ca.pem --pip-index-url https://u:p@pypi.corp/simple
    """
    from imagebuild.builder import BuildOptions, build_plan, make_progress
    from imagebuild.engine import connect

    check_inputs(inputs)
    plan = load_plan(matrix, inputs, registry)
    client = connect("build")  # its timeout also fits --push of multi-GB layers
    buildable, blocked = preflight_sources(client, plan, tuple(only), keep_going)
    progress = make_progress(plain=plain, verbose=verbose)
    options = BuildOptions(force=force, only=tuple(only), keep_going=keep_going, log_dir=log_dir, created=created)
    if jobs:
        options.jobs = jobs
    results = (build_plan(client, buildable, options, progress) if buildable.images else []) + blocked
    order = {img.tag: n for n, img in enumerate(plan.images)}
    results.sort(key=lambda r: order[r.tag])
    progress.summary(results)
    ok = all(r.status in ("built", "up-to-date", "skipped") for r in results)

    by_tag = {r.tag: r for r in results}
    ready = [i for i in plan.images if by_tag[i.tag].status in ("built", "up-to-date")]
    if run_tests and ready and (ok or keep_going):
        ok = smoke_test(client, ready, by_tag, report_dir) and ok
    if run_push and ok:
        ok = push(client, plan, ready, by_tag, report_dir, require_tests=run_tests) and ok
    from imagebuild.report import write_reports

    write_reports(results, report_dir, plan)
    return EXIT_OK if ok else EXIT_FAILED


def preflight_sources(client, plan, only: tuple[str, ...], keep_going: bool):
    """Ask every outside source the selected images need before anything builds (builder.sources).

    Images whose source does not answer are named one line each; without --keep-going that stops the run (exit 1,
    nothing built), with it they and their children become failed/not-built rows and the rest is built."""
    from imagebuild.builder.sources import blocked_tags, unreachable
    from imagebuild.models import ImageResult, Plan
    from imagebuild.plan.assemble import select

    selected = select(plan, only or None)

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


def smoke_test(client, images, by_tag, report_dir: Path) -> bool:
    """--test: the smoke suite in every built/up-to-date image; fills ImageResult.tests. False when a check failed."""
    from imagebuild.smoke import runner

    rows = runner.test_images(images, by_tag, client=client, junit_dir=Path(report_dir) / "junit",
                              result_dir=Path(report_dir) / "tests", echo=lambda m: click.echo(m, err=True))
    click.echo(runner.summary_table([(img.tag, tests) for img, tests in rows]))
    return not any(t.get("failed") for _, t in rows)


def push(client, plan, images, by_tag, report_dir: Path, require_tests: bool) -> bool:
    """--push: push built (and, with --test, tested) images; fills ImageResult.push. False when one failed."""
    from imagebuild.oci import resolve_auth
    from imagebuild.push import push_plan
    from imagebuild.report.writer import result_to_row
    from imagebuild.secrets import redact

    auths: dict = {}

    def auth_for(registry: str):
        if registry not in auths:
            auths[registry] = resolve_auth(registry)
        return auths[registry]

    pushed = push_plan(plan, client=client, auth_for=auth_for, images=images,
                       report_rows={t: result_to_row(r) for t, r in by_tag.items()}, require_tests=require_tests,
                       log=lambda m: click.echo(redact(m), err=True))
    for res in pushed:
        by_tag[res.tag].push = res.push
        p = res.push or {}
        click.echo(redact(f"{p.get('status', '?'):>9}  {res.tag}  {p.get('digest') or p.get('reason') or ''}"))
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


def load_plan(matrix: str, inputs, registry):
    from imagebuild.commands._options import resolve_matrix_path
    from imagebuild.plan import make_plan

    return make_plan(resolve_matrix_path(matrix), inputs, registry)
