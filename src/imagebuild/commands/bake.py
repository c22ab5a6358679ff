"""`imagebuild bake`: export the plan as a `docker buildx bake` file (compose form by default: it keeps host
networking; `-o x.json` writes bake JSON), rendered for BuildKit unless `--backend classic` says otherwise."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from imagebuild.inputs import BuildInputs


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
def command(matrix: str, registry: str | None, inputs: BuildInputs, output: str, context_dir: str | None,
            os_images: tuple[str, ...], only: tuple[str, ...], state_dir: str | None) -> int:
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
    from imagebuild.pipeline.export import archives, bake_file  # the stages: not for --help

    mapping: dict[str, str] = {}
    for item in os_images:
        key, sep, ref = item.partition("=")
        if not sep or not key or not ref:
            raise UsageError(f"--os-image {item!r}: expected OS=REF (e.g. debian12=registry/os/debian:12)")
        mapping[key] = ref
    options = RunOptions(command=Step.BUILD, matrix=matrix, registry=registry, inputs=inputs, only=tuple(only),
                         state_dir=state_dir)
    doc = bake_file(options, output, context_dir, mapping, lambda m: click.echo(m, err=True))
    targets = doc.get("target") or doc.get("services") or {}
    name = shlex.quote(Path(output).name)
    loads = archives(doc)
    then = (f", then load its images: `for t in {' '.join(shlex.quote(a) for a in loads)}; do docker load -i \"$t\"; "
            "done` (this engine's docker driver exports them as archives to keep build's image IDs)") if loads else ""
    click.echo(f"{output}: {len(targets)} targets; run `docker buildx bake -f {name}` from its folder{then}", err=True)
    return 0
