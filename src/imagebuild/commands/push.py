"""`imagebuild push`: push built (and tested) images, their tags and moving aliases, to the matrix's registry."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from imagebuild.commands._options import (
    compression_option,
    layer_limit_option,
    matrix_option,
    only_option,
    registry_option,
    sign_options,
    sign_password,
    state_dir_option,
)
from imagebuild.errors import EXIT_FAILED, EXIT_OK, UsageError
from imagebuild.oci import read_password_stdin
from imagebuild.pipeline.settings import PushSettings, RunOptions, Step


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
@layer_limit_option
@sign_options
@compression_option
def command(matrix: str, registry: str | None, username: str | None, password_stdin: bool, dry_run: bool,
            only: tuple[str, ...], state_dir: str | None, retries: int, report_dir: str | None, untested: bool,
            ca_file: str | None, layer_limit: int | None, sign_key: str | None, sign_password_stdin: bool,
            compression: str | None) -> int:
    """Push every built and tested image of a matrix: the full tag plus its aliases (moving aliases such as
    2.9-cuda12.8-runtime point at the newest patch), then verify the digest the registry serves.

    Layers are written zstd-compressed with OCI media types (Docker >= 23, containerd >= 1.5, enroot >= 3.5 pull
    them); --compression gzip (or the matrix's `compression`) writes gzip with Docker media types for older runtimes.
    Each image is written by digest first and verified; only then do its tags move.

    Images whose tag already points at the same digest are skipped. Transient registry failures are retried with
    exponential backoff; refused credentials fail at once (exit 1) with the registry's message.

    \b
    Credentials (never on the command line): --username U --password-stdin, or IMAGEBUILD_REGISTRY_USER +
    IMAGEBUILD_REGISTRY_PASSWORD, or `docker login` (~/.docker/config.json, credential helpers).

    \b
    Signing (--sign-key): each pushed digest is signed with cosign (key-based, no transparency log) before any
    alias names it, and carries two signed attestations: the image's CycloneDX SBOM and a SLSA v1 provenance made
    from the record. A key that cannot sign stops the run before anything is pushed; a refused signature leaves no
    tag on the unsigned digest. Check with `imagebuild verify REF --key cosign.pub`.

    \b
    Example:
      imagebuild push --matrix images/cpu.yaml --dry-run
      COSIGN_PASSWORD=... imagebuild push -m cpu.yaml --sign-key cosign.key
      echo "$TOKEN" | imagebuild push -m cpu.yaml --registry 127.0.0.1:5000/ml -u ci --password-stdin
    """
    from imagebuild.pipeline.flow import push_run  # the engine SDK and the stages: not for --help

    if password_stdin and not username:
        raise UsageError("--password-stdin needs --username")
    key_password = sign_password(sign_key, sign_password_stdin, password_stdin)
    password = read_password_stdin(sys.stdin) if password_stdin else None
    options = RunOptions(
        command=Step.PUSH, matrix=matrix, registry=registry, only=tuple(only), state_dir=state_dir,
        report_dir=Path(report_dir) if report_dir else None,
        push=PushSettings(require_tests=not untested, retries=retries, ca_file=ca_file, username=username,
                          password=password, dry_run=dry_run, sign_key=sign_key, sign_password=key_password,
                          compression=compression, layer_limit=layer_limit))
    result = push_run(options, lambda m: click.echo(m, err=True), click.echo)
    return EXIT_OK if result.ok else EXIT_FAILED
