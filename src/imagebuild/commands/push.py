"""`imagebuild push`: push built (and tested) images, their tags and moving aliases, to the matrix's registry."""

from __future__ import annotations

import sys

import click

from imagebuild.commands._options import (
    default_report_dir,
    matrix_option,
    only_option,
    registry_option,
    state_dir_option,
)


@click.command("push")
@matrix_option
@registry_option
@click.option("--username", "-u", default=None, envvar=None, metavar="USER",
              help="Registry user; the password comes from --password-stdin or IMAGEBUILD_REGISTRY_PASSWORD.")
@click.option("--password-stdin", is_flag=True, help="Read the registry password from standard input.")
@click.option("--dry-run", is_flag=True, help="Print what would be pushed where; contact no registry.")
@only_option
@state_dir_option
@click.option("--retries", default=4, show_default=True, type=click.IntRange(0, 20),
              help="Retries of a push that failed for a transient reason (5xx, reset, timeout), with backoff.")
@click.option("--report-dir", default=None, metavar="DIR",
              help="Where this run's build-report.json/.md/junit.xml go (default: reports/<matrix>/).")
@click.option("--untested", is_flag=True,
              help="Also push built images that have no smoke-test results (never ones whose tests failed).")
@click.option("--ca-file", default=None, type=click.Path(dir_okay=False, exists=True),
              help="CA certificate of a TLS registry (default: /etc/docker/certs.d/<registry>/ca.crt).")
def command(matrix, registry, username, password_stdin, dry_run, only, state_dir, retries, report_dir, untested,
            ca_file):
    """Push every built and tested image of a matrix: the full tag plus its aliases (moving aliases such as
    2.9-cuda12.8-runtime point at the newest patch), then verify the digest the registry serves.

    Images whose tag already points at the same digest are skipped. Transient registry failures are retried with
    exponential backoff; refused credentials fail at once (exit 1) with the registry's message.

    \b
    Credentials (never on the command line): --username U --password-stdin, or IMAGEBUILD_REGISTRY_USER +
    IMAGEBUILD_REGISTRY_PASSWORD, or `docker login` (~/.docker/config.json, credential helpers).

    \b
    Example:
      imagebuild push --matrix images/cpu.yaml --dry-run
      echo "$TOKEN" | imagebuild push -m cpu.yaml --registry 127.0.0.1:5000/ml -u ci --password-stdin
    """
    from pathlib import Path

    from imagebuild import __version__
    from imagebuild.commands._pushing import gate_rows, push_located
    from imagebuild.commands._state import locate, plan_registry, plan_with_record
    from imagebuild.errors import EXIT_FAILED, EXIT_OK, UsageError
    from imagebuild.files import check_output_dir
    from imagebuild.oci import Reference, ReferenceError, read_password_stdin, resolve_auth
    from imagebuild.plan.assemble import matching
    from imagebuild.plan.tags import references
    from imagebuild.push import gate
    from imagebuild.record import now
    from imagebuild.record.store import state_dir as record_state_dir
    from imagebuild.record.update import fill_row
    from imagebuild.report import write_reports

    started = now()
    if password_stdin and not username:
        raise UsageError("--password-stdin needs --username")
    password = read_password_stdin(sys.stdin) if password_stdin else None

    def say(msg: str) -> None:
        click.echo(msg, err=True)

    planned = plan_with_record(matrix, registry, None, say, state_dir)
    check_output_dir(Path(report_dir) if report_dir else default_report_dir(planned.path), "--report-dir")
    check_output_dir(record_state_dir(state_dir), "--state-dir")
    plan = planned.plan
    images = matching(plan, tuple(only))
    if not images:
        raise UsageError(f"--only {' '.join(only)}: matches no image of {planned.path}")
    require_tests = not untested
    from imagebuild.engine import connect

    client = connect("push")
    located: dict[str, str | None] = {}
    why: dict[str, str] = {}
    for img in images:
        located[img.tag], why[img.tag] = locate(client, img, planned.record)

    if dry_run:
        rows = gate_rows(images, located, why, planned.record)
        for image in images:
            reason = gate(image, rows.get(image.tag), require_tests)
            try:
                refs = [Reference.parse(ref) for ref in references(image)]
            except ReferenceError as exc:
                raise UsageError(f"{image.tag}: {exc}") from None
            head = f"{image.tag}" + (f"  (not pushed: {reason})" if reason else "")
            click.echo(head)
            for ref in refs[1:]:
                click.echo(f"    + alias {ref.tag}")
            click.echo(f"    -> {refs[0].registry}")
        click.echo(f"dry run: {len(images)} image(s); nothing pushed")
        return EXIT_OK

    auths: dict = {}

    def auth_for(reg: str):
        if reg not in auths:
            auths[reg] = resolve_auth(reg, username=username, password=password)
            say(f"push: credentials {auths[reg].describe()}")
        return auths[reg]

    results = push_located(client, plan, images, located, planned.path, state_dir, require_tests=require_tests,
                           log=say, why=why, auth_for=auth_for, retries=retries, ca_file=ca_file)
    for res in results:
        img = plan.by_tag()[res.tag]
        fill_row(planned.record, img, res)
    paths = write_reports(results, Path(report_dir) if report_dir else default_report_dir(planned.path), plan, run={
        "command": "push", "steps": ["push"], "registry": plan_registry(plan), "started": started,
        "tool_version": __version__})
    failed = sum(1 for r in results if (r.push or {}).get("status") in ("failed", "skipped"))
    say(f"push: {len(results) - failed} ok, {failed} not pushed; report {paths['md']}")
    return EXIT_FAILED if failed else EXIT_OK
