"""`imagebuild build`: build every planned image through the Docker engine, in dependency order (flags only: the
pipeline is imagebuild.pipeline.flow.build_run)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from imagebuild.backends import AUTO
from imagebuild.commands._options import (
    backend_run_options,
    build_input_options,
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
from imagebuild.pipeline.settings import (
    BuildSettings,
    PushSettings,
    RunOptions,
    Step,
    TestSettings,
    check_created,
)

if TYPE_CHECKING:
    from imagebuild.inputs import BuildInputs


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
              help="Smoke-test the images afterwards (an image that already passed this suite is up to date); "
                   "with the matrix's `audit:` policy, audit them too: a violation fails the build (exit 1).")
@click.option("--retest", is_flag=True, help="With --test: run the suite even where it already passed.")
@click.option("--created", metavar="now|DATE", callback=lambda ctx, param, value: check_created(value),
              help="The org.opencontainers.image.created label: 'now' (the build time) or an RFC 3339 date. "
                   "Default: the source date (SOURCE_DATE_EPOCH, else the OS base image's date), so an unchanged "
                   "rebuild gives the same image. A rebuild whose content equals the image its tag named before "
                   "keeps that image, and its date.")
@click.option("--push", "run_push", is_flag=True, help="Push the built (and tested) images afterwards.")
@layer_limit_option
@click.option("--registry-cache/--no-registry-cache", "registry_cache", default=True, show_default=True,
              help="Ask the registry first: an image it holds with the planned inputs hash is up to date there "
                   "(not built; pulled by digest only when a child must be built on it).")
@click.option("--require-registry", is_flag=True,
              help="A registry that does not answer or refuses the credentials is an error, not a local build.")
@click.option("--sbom/--no-sbom", "sbom", default=True, show_default=True,
              help="Write a CycloneDX SBOM per image beside the report (reports/<matrix>/sbom/), its digest in the "
                   "report; a rebuild's report also shows the diff against the image the tag pointed at before.")
@backend_run_options
@click.option("--locked", is_flag=True,
              help="Refuse to build (exit 2) unless the matrix's lock (images/X.lock) exists and fits the matrix. "
                   "Without it an existing lock is used too; a missing one means an unlocked build.")
@click.option("--security-refresh", "security_refresh", is_flag=True,
              help="Rebuild the images whose OS packages the release's signed security suite has fixes for (as "
                   "`plan --security` shows them) and their children: each stale image's apt step carries the "
                   "suite's identity and upgrades the fixed packages; with a lock, its pins are raised to the fixed "
                   "versions. Implies --test; the record says why each image was rebuilt.")
@sign_options
@compression_option
def command(matrix: str, registry: str | None, inputs: BuildInputs, only: tuple[str, ...], force: bool,
            jobs: int | None, keep_going: bool, plain: bool, verbose: bool, log_dir: Path | None,
            report_dir: Path | None, state_dir: str | None, run_tests: bool, retest: bool, run_push: bool,
            layer_limit: int | None, registry_cache: bool, require_registry: bool, sbom: bool, locked: bool,
            created: str | None, security_refresh: bool, sign_key: str | None, sign_password_stdin: bool,
            compression: str | None, **backend_options: str | None) -> int:
    """Build the matrix's images: parents once, children FROM the parent's image ID, unchanged images skipped.

    \b
    Example:
      imagebuild build --matrix images/cpu.yaml --wheelhouse /opt/wheels
      imagebuild build --matrix h100.yaml --only '*2.9.1*runtime' --jobs 2 --plain
      imagebuild build --matrix images/cpu.yaml --ca-cert corp-ca.pem --pip-index-url https://u:p@pypi.corp/simple
      imagebuild build --matrix images/cpu.yaml --security-refresh
    """
    if inputs.backend in (None, AUTO):  # auto asks the engine's and buildx's versions: while the stages import
        from imagebuild.engine.cli import prefetch_versions

        prefetch_versions()
    from imagebuild.pipeline.flow import build_run  # the engine SDK and the stages: not for --help

    source = click.get_current_context().get_parameter_source("sign_key")
    if sign_key and not run_push and source == click.core.ParameterSource.COMMANDLINE:
        raise UsageError("--sign-key signs what is pushed: add --push (or sign later with `imagebuild push`)")
    key_password = sign_password(sign_key, sign_password_stdin)
    if compression and not run_push:
        raise UsageError("--compression is how --push writes layers: give --push too")
    if security_refresh and not run_tests:
        _say("security-refresh: the rebuilt images are tested (as --test)")
        run_tests = True
    options = RunOptions(
        command=Step.BUILD, matrix=matrix, registry=registry, inputs=inputs, only=tuple(only), state_dir=state_dir,
        report_dir=report_dir,
        build=BuildSettings(force=force, jobs=jobs, keep_going=keep_going, plain=plain, verbose=verbose,
                            log_dir=log_dir, registry_cache=registry_cache, require_registry=require_registry,
                            sbom=sbom, locked=locked, created=created, security_refresh=security_refresh,
                            backend_options={k: v for k, v in backend_options.items() if v}),
        test=TestSettings(retest=retest) if run_tests else None,
        push=PushSettings(require_tests=run_tests, sign_key=sign_key, sign_password=key_password,
                          compression=compression, layer_limit=layer_limit) if run_push else None,
    )
    result = build_run(options, _say, click.echo)
    _say(f"report: {result.report_md}")
    return EXIT_OK if result.ok else EXIT_FAILED
