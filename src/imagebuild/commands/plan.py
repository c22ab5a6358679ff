"""`imagebuild plan`: what would be built, with every pin resolved, before anything builds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from imagebuild.commands._options import (
    build_input_options,
    matrix_option,
    registry_option,
    state_dir_option,
)

if TYPE_CHECKING:
    from imagebuild.audit.stale import Staleness
    from imagebuild.inputs import BuildInputs


@click.command("plan")
@matrix_option
@registry_option
@build_input_options
@state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of images.")
@click.option("--github-matrix", is_flag=True, help="Print a GitHub Actions strategy.matrix (one job per variant).")
@click.option("--security", "security", is_flag=True,
              help="Also check each built image (the record's image ID for these inputs, read from the engine) "
                   "against its release's signed security suite (network: the suite's InRelease): column/JSON "
                   "`stale` (N security fixes, index SUITE@DATE/sha256), fresh, or not checked (no image, no engine, "
                   "no trusted index). Off by default: plan stays offline.")
def command(matrix: str, registry: str | None, inputs: BuildInputs, state_dir: str | None, as_json: bool,
            github_matrix: bool, security: bool) -> int:
    """Print the images a matrix would build: tag, flavor, parent, key versions, inputs hash — with the build
    inputs its record (.imagebuild/<matrix>.state.json) holds when no build-input flag is given, so the hash is the
    one the built image carries, and (column `built`) the image ID the record has for exactly these inputs.

    \b
    Example:
      imagebuild plan --matrix images/h100.yaml
      imagebuild plan --matrix h100.yaml --json | jq '.[].tag'
      imagebuild plan --matrix images/h100.yaml --github-matrix
      imagebuild plan --matrix images/cpu.yaml --security
    """
    from imagebuild.pipeline.layers import plan_layers
    from imagebuild.pipeline.loaded import load
    from imagebuild.pipeline.located import record_states  # the builder's label names: not for --help
    from imagebuild.plan.output import github_matrix as gh_matrix
    from imagebuild.plan.output import plan_json, print_table
    from imagebuild.report.layers import format_layers

    planned = load(matrix, registry, inputs, state_dir, lambda m: click.echo(m, err=True))
    plan = planned.plan
    assumed = offline_backend_note(planned.inputs.backend, [img.variant.backend for img in plan.images])
    if assumed:
        click.echo(assumed, err=True)
    recorded = record_states(planned.record, plan)
    states = None if recorded is None else {k: v.as_dict() for k, v in recorded.items()}
    if github_matrix:
        click.echo(gh_matrix(plan))
        return 0
    layers = plan_layers(plan.images, {k: v.image_id for k, v in (recorded or {}).items()})
    stale = security_states(planned, state_dir) if security else None
    if as_json:
        click.echo(plan_json(plan, states, layers, stale))
    else:
        print_table(plan, states=states, security=stale)
        for img in plan.images:
            if img.id in layers:
                click.echo(f"{img.short_tag}: environment layers, least changing first")
                for line in format_layers(layers[img.id]):
                    click.echo(line)
    return 0


def security_states(planned: Any, state_dir: str | None) -> dict[str, Staleness]:
    """plan --security: each planned image's staleness (pipeline/staleness.py); no engine: every one not checked."""
    from imagebuild.audit.debian import SecurityIndexes
    from imagebuild.audit.stale import not_checked
    from imagebuild.compat import load as load_tables
    from imagebuild.engine import connect
    from imagebuild.errors import ImagebuildError
    from imagebuild.pipeline.staleness import check_images
    from imagebuild.record.derived import Derived

    def say(message: str) -> None:
        click.echo(message, err=True)

    try:
        client = connect("inspect")
    except ImagebuildError as exc:  # said once; each image is not checked, never fresh
        say(f"plan --security: {exc}")
        return {img.id: not_checked("no Docker engine answered") for img in planned.plan.images}
    return check_images(planned.plan.images, planned.record, client, Derived(state_dir, say),
                        SecurityIndexes(load_tables()))


def offline_backend_note(given: str | None, rows: list[str]) -> str | None:
    """The line that says which backend `auto` was planned as when neither a flag nor the record names one: the
    backend renders its own Dockerfiles, so the hashes shown are that backend's (planning asks no engine)."""
    from imagebuild.backends import AUTO, OFFLINE, spec

    if given not in (None, AUTO) or not any(row == AUTO for row in rows):
        return None
    return (f"backend auto: no record or flag names it; the hashes shown are for {spec(OFFLINE).title} (planning "
            "asks no engine; a build on Docker Engine >= 23 with buildx uses BuildKit: --backend buildkit shows "
            "its hashes)")
