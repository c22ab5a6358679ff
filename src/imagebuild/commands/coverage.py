"""`imagebuild coverage PATH --gpu sm_90`: which target GPUs a wheel's or a folder's CUDA code runs on."""

from __future__ import annotations

import json

import click


@click.command("coverage")
@click.argument("path", metavar="PATH", type=click.Path(exists=True))
@click.option("--gpu", "gpus", multiple=True, required=True, metavar="ARCH",
              help="A target GPU: sm_XY (sm_90, sm_100, sm_90a) or a GPU name of the compatibility data (h100). "
                   "Repeat for each.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def command(path: str, gpus: tuple[str, ...], as_json: bool) -> int:
    """Read which SASS architectures and PTX every CUDA shared object under PATH carries (its .nv_fatbin section
    and the fatbin containers in its data sections, as cuFFT keeps its kernels; a cubin without a kernel does not
    count: no GPU, no CUDA toolkit) and say, per target GPU, whether it runs natively, only through PTX JIT, or not
    at all. Exit 1 naming each library and the architecture it lacks.

    \b
    PATH: a wheel (*.whl), a folder (every shared object and wheel under it: a wheelhouse, site-packages) or one
    shared object. The rules are those of the smoke suite's coverage check: sm_86 SASS runs on sm_89 (same major,
    newer minor), sm_90a only on sm_90, PTX on every GPU at least as new (JIT at the first launch).

    \b
    Example:
      imagebuild coverage wheelhouse/ --gpu sm_90 --gpu sm_100
      imagebuild coverage flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl --gpu h100 --json
    """
    from imagebuild.smoke.coverage import coverage, format_text

    cov = coverage(path, list(gpus))
    if as_json:
        click.echo(json.dumps(cov.to_json(), indent=2, sort_keys=True))
    else:
        click.echo(format_text(cov), nl=False)
    return 1 if cov.failures else 0
