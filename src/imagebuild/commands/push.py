"""`imagebuild push`: push built (and tested) images, their tags and moving aliases, to the matrix's registry."""

from __future__ import annotations

import sys

import click

from imagebuild.commands._options import matrix_option, registry_option, resolve_matrix_path


def _load_plan(matrix: str, registry: str | None):
    from imagebuild.plan import make_plan

    return make_plan(resolve_matrix_path(matrix), None, registry)


def _select(plan, pattern: str | None):
    from imagebuild.plan.assemble import select

    return select(plan, pattern)


@click.command("push")
@matrix_option
@registry_option
@click.option("--username", "-u", default=None, envvar=None, metavar="USER",
              help="Registry user; the password comes from --password-stdin or IMAGEBUILD_REGISTRY_PASSWORD.")
@click.option("--password-stdin", is_flag=True, help="Read the registry password from standard input.")
@click.option("--dry-run", is_flag=True, help="Print what would be pushed where; contact no registry.")
@click.option("--only", default=None, metavar="PATTERN",
              help="Only images whose tag, short tag or id matches this fnmatch pattern (plus their parents).")
@click.option("--retries", default=4, show_default=True, type=click.IntRange(0, 20),
              help="Retries of a push that failed for a transient reason (5xx, reset, timeout), with backoff.")
@click.option("--report-dir", default="reports", show_default=True, metavar="DIR",
              help="build-report.json here decides what was built/tested; push results are merged into it.")
@click.option("--untested", is_flag=True,
              help="Also push built images that have no smoke-test results (never ones whose tests failed).")
@click.option("--ca-file", default=None, type=click.Path(dir_okay=False, exists=True),
              help="CA certificate of a TLS registry (default: /etc/docker/certs.d/<registry>/ca.crt).")
def command(matrix, registry, username, password_stdin, dry_run, only, retries, report_dir, untested, ca_file):
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
    from imagebuild.errors import EXIT_FAILED, EXIT_OK, UsageError
    from imagebuild.oci import Reference, ReferenceError, read_password_stdin, resolve_auth
    from imagebuild.plan.tags import references
    from imagebuild.push import gate, push_plan
    from imagebuild.report import report_rows, write_reports
    from imagebuild.secrets import redact

    if password_stdin and not username:
        raise UsageError("--password-stdin needs --username")
    password = read_password_stdin(sys.stdin) if password_stdin else None
    plan = _load_plan(matrix, registry)
    images = _select(plan, only)
    if not images:
        raise UsageError(f"--only {only!r} matches no image of {plan.matrix_file}")
    rows = report_rows(report_dir)
    require_tests = not untested

    if dry_run:
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
            click.echo(f"push: credentials {auths[reg].describe()}", err=True)
        return auths[reg]

    from imagebuild.engine import connect

    client = connect("push")

    def log(msg: str) -> None:
        click.echo(redact(msg), err=True)

    results = push_plan(plan, client=client, auth_for=auth_for, images=images, report_rows=rows,
                        require_tests=require_tests, retries=retries, log=log, ca_file=ca_file)
    paths = write_reports(results, report_dir, plan)
    failed = 0
    for res in results:
        p = res.push or {}
        status = p.get("status")
        digest = p.get("digest") or ""
        line = f"{status:>9}  {res.tag}  {digest}"
        if status in ("failed", "skipped"):
            failed += 1
            line += f"  ({p.get('error') or p.get('reason')})"
        click.echo(redact(line))
    click.echo(f"push: {len(results) - failed} ok, {failed} not pushed; report {paths['md']}", err=True)
    return EXIT_FAILED if failed else EXIT_OK
