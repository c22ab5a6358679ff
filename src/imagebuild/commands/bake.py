"""`imagebuild bake`: export the plan as a `docker buildx bake` file (compose form by default: it keeps host
networking; `-o x.json` writes bake JSON), rendered for BuildKit unless `--backend classic` says otherwise."""

from __future__ import annotations

import click

from imagebuild.commands._options import (
    build_input_options,
    matrix_option,
    only_option,
    registry_option,
    state_dir_option,
)


@click.command("bake")
@matrix_option
@registry_option
@build_input_options
@click.option("--output", "-o", default="docker-bake.yml", show_default=True, metavar="FILE",
              help="Bake file to write: .yml/.yaml compose form (network host, secrets by id), .json bake JSON "
                   "(buildx 0.13 drops its network: no RUN works on an engine without a bridge).")
@click.option("--context-dir", default=None, metavar="DIR",
              help="Where the build contexts go (default: bake-context/ beside the bake file).")
@click.option("--os-image", "os_images", multiple=True, metavar="OS=REF",
              help="Default reference of a bootstrapped OS base, e.g. debian12=reg/os/debian:12 (else the "
                   "OS_IMAGE_<os> variable at bake time); repeatable.")
@only_option
@state_dir_option
def command(matrix, registry, inputs, output, context_dir, os_images, only, state_dir):
    """Write the same plan as a buildx bake file: one target per image with its context, Dockerfile, build args,
    labels and tags (+ aliases); children chain to their parent with `contexts = target:<parent>`. Runtime images
    with transformer_engine get the TE wheel `imagebuild build` compiled once (the wheel cache); export after it.

    \b
    Example:
      imagebuild bake --matrix images/h100.yaml -o out/docker-bake.yml
      cd out && OS_IMAGE_ubuntu24_04=reg.example/os/ubuntu:24.04 docker buildx bake -f docker-bake.yml --push
    A credentialed index is a build secret read from the environment at bake time (PIP_INDEX_URL /
    PIP_EXTRA_INDEX_URL with the value given here), never written into the file.
    """
    from imagebuild.builder.bake import write_bake
    from imagebuild.commands._state import plan_with_record
    from imagebuild.errors import UsageError
    from imagebuild.models import Plan
    from imagebuild.plan.assemble import select

    mapping = {}
    for item in os_images:
        key, sep, ref = item.partition("=")
        if not sep or not key or not ref:
            raise UsageError(f"--os-image {item!r}: expected OS=REF (e.g. debian12=registry/os/debian:12)")
        mapping[key] = ref
    from dataclasses import replace

    inputs = replace(inputs, backend=inputs.backend or "buildkit")  # bake builds with BuildKit
    plan = plan_with_record(matrix, registry, inputs, lambda m: click.echo(m, err=True), state_dir).plan
    if only:
        images = select(plan, tuple(only))
        if not images:
            raise UsageError(f"--only {' '.join(only)}: matches no image of {plan.matrix_file}")
        plan = Plan(matrix_file=plan.matrix_file, images=images)
    doc = write_bake(plan, output, context_dir, mapping, secrets=inputs.backend == "buildkit")
    targets = doc.get("target") or doc.get("services") or {}
    click.echo(f"{output}: {len(targets)} targets; run `docker buildx bake -f {output}` from its folder",
               err=True)
    return 0
