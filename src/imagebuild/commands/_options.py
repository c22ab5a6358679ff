"""Flags shared by several commands (one definition, so every command spells them the same way); parsing only,
what they mean is imagebuild.pipeline.settings."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from imagebuild.inputs import BuildInputs
from imagebuild.pipeline.settings import resolve_matrix_path

# resolve_matrix_path is pipeline.settings'; lock.py and render.py import it from here
__all__ = ["build_input_options", "layer_limit_option", "matrix_option", "only_option", "registry_option",
           "resolve_matrix_path", "state_dir_option"]

F = TypeVar("F", bound=Callable[..., Any])


def matrix_option(func: F) -> F:
    return click.option(
        "--matrix",
        "-m",
        "matrix",
        required=True,
        metavar="FILE",
        help="Matrix YAML; a bare name such as h100.yaml is also looked up in ./images/.",
    )(func)


def only_option(func: F) -> F:
    """--only, spelled and matched the same in build, test, push, bake, run (plan.assemble.matches)."""
    return click.option(
        "--only", "only", multiple=True, metavar="PATTERN",
        help="Only images whose id, tag, short tag, variant or flavor matches: a glob (`*2.9.1*runtime`) or plain "
             "text (a substring: `runtime`); commas separate alternatives; repeatable. build and bake also handle "
             "the parents the selected images need.",
    )(func)


def state_dir_option(func: F) -> F:
    return click.option("--state-dir", default=None, metavar="DIR", envvar="IMAGEBUILD_STATE_DIR",
                        help="Where the per-matrix record lives (default .imagebuild/; env IMAGEBUILD_STATE_DIR).",
                        )(func)


def registry_option(func: F) -> F:
    return click.option("--registry", default=None, metavar="HOST[:PORT]/PATH",
                        help="Override the matrix's `registry` (use '' for local-only tags).")(func)


def _layer_limit(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    from imagebuild.matrix.schema import parse_size  # the one size grammar (matrix size_budget / layer_limit)

    if value is None:
        return None
    try:
        size = parse_size(value)
    except ValueError:
        size = 0
    if size <= 0:
        raise click.BadParameter(f"expected a size like 8GiB or 5GB, got {value!r}")
    return size


def layer_limit_option(func: F) -> F:
    """--layer-limit for push and build --push: over it, an image is refused before anything is pushed."""
    return click.option("--layer-limit", "layer_limit", default=None, metavar="SIZE", callback=_layer_limit,
                        help="Refuse to push an image with a layer larger than this (e.g. 8GiB; default: the "
                             "matrix's layer_limit, else 8 GiB; registries such as GHCR refuse layers over 10 GB).",
                        )(func)


def build_input_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--ca-cert/--pip-index-url/--pip-extra-index-url/--torch-index-url/--wheelhouse/--backend -> kwarg `inputs`."""

    @click.option("--ca-cert", "ca_certs", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
                  help="Extra CA certificate (PEM) for the image's system store; repeatable.")
    @click.option("--pip-index-url", default=None, metavar="URL", help="Replaces PyPI (credentials stay out of images).")
    @click.option("--pip-extra-index-url", "pip_extra", multiple=True, metavar="URL", help="Extra index; repeatable.")
    @click.option("--torch-index-url", default=None, metavar="URL|none",
                  help="Override the torch wheel index chosen by resolution ('none': PyPI/wheelhouse only).")
    @click.option("--wheelhouse", default=None, type=click.Path(file_okay=False, path_type=Path),
                  help="Local wheel folder for pip stages only (never copied into a final image).")
    @click.option("--backend", type=click.Choice(["classic", "buildkit"]), default=None,
                  help="How images are built (default: the matrix's `backend`, else classic). buildkit renders "
                       "cache mounts and build secrets and builds through `docker buildx build` (engine >= 23).")
    @functools.wraps(func)
    def wrapper(*args: Any, ca_certs: tuple[Path, ...], pip_index_url: str | None, pip_extra: tuple[str, ...],
                torch_index_url: str | None, wheelhouse: Path | None, backend: str | None, **kwargs: Any) -> Any:
        kwargs["inputs"] = BuildInputs(
            ca_certs=tuple(ca_certs),
            pip_index_url=pip_index_url,
            pip_extra_index_urls=tuple(pip_extra),
            torch_index_url=torch_index_url,
            wheelhouse=wheelhouse,
            backend=backend,
        )
        return func(*args, **kwargs)

    return wrapper


