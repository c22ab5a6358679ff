"""`imagebuild plan`: what would be built, with every pin resolved, before anything builds."""

from __future__ import annotations

import click

from imagebuild.commands._options import (
    build_input_options,
    matrix_option,
    registry_option,
    resolve_matrix_path,
)


@click.command("plan")
@matrix_option
@registry_option
@build_input_options
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of images.")
@click.option("--github-matrix", is_flag=True, help="Print a GitHub Actions strategy.matrix (one job per variant).")
def command(matrix, registry, inputs, as_json, github_matrix):
    """Print the images a matrix would build: tag, flavor, parent, key versions, inputs hash.

    \b
    Example:
      imagebuild plan --matrix images/h100.yaml
      imagebuild plan --matrix h100.yaml --json | jq '.[].tag'
      imagebuild plan --matrix images/h100.yaml --github-matrix
    """
    from imagebuild.plan import make_plan
    from imagebuild.plan.output import github_matrix as gh_matrix
    from imagebuild.plan.output import plan_json, print_table

    path = resolve_matrix_path(matrix)
    plan = make_plan(path, inputs, registry)
    if github_matrix:
        click.echo(gh_matrix(plan))
    elif as_json:
        click.echo(plan_json(plan))
    else:
        print_table(plan)
    return 0
