"""`imagebuild bake`: export the plan as a `docker buildx bake` JSON file (remote BuildKit clusters)."""

from __future__ import annotations

import click

from imagebuild.commands._options import (
    build_input_options,
    matrix_option,
    only_option,
    registry_option,
    state_dir_option,
)
from imagebuild.errors import UsageError
from imagebuild.pipeline.settings import RunOptions, Step


@click.command("bake")
@matrix_option
@registry_option
@build_input_options
@click.option("--output", "-o", default="docker-bake.json", show_default=True, metavar="FILE",
              help="Bake file to write.")
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
      imagebuild bake --matrix images/h100.yaml -o out/docker-bake.json
      cd out && OS_IMAGE_ubuntu24_04=reg.example/os/ubuntu:24.04 docker buildx bake -f docker-bake.json --push
    """
    from imagebuild.pipeline.export import bake_file  # the stages: not for --help

    mapping = {}
    for item in os_images:
        key, sep, ref = item.partition("=")
        if not sep or not key or not ref:
            raise UsageError(f"--os-image {item!r}: expected OS=REF (e.g. debian12=registry/os/debian:12)")
        mapping[key] = ref
    options = RunOptions(command=Step.BUILD, matrix=matrix, registry=registry, inputs=inputs, only=tuple(only),
                         state_dir=state_dir)
    doc = bake_file(options, output, context_dir, mapping, lambda m: click.echo(m, err=True))
    click.echo(f"{output}: {len(doc['target'])} targets; run `docker buildx bake -f {output}` from its folder",
               err=True)
    return 0
