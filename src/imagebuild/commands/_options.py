"""Flags shared by several commands (one definition, so every command spells them the same way); parsing only,
what they mean is imagebuild.pipeline.settings."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from imagebuild.backends import BACKENDS, choices
from imagebuild.errors import UsageError
from imagebuild.inputs import BuildInputs
from imagebuild.pipeline.settings import resolve_matrix_path
from imagebuild.secrets import redact_url, register_url_credentials

# resolve_matrix_path is pipeline.settings'; lock.py and render.py import it from here
__all__ = ["build_input_options", "layer_limit_option", "matrix_option", "no_empty_key", "only_option", "registry_option",
           "resolve_matrix_path", "sign_options", "sign_password", "state_dir_option", "verify_key_option"]

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
    """--only, spelled and matched the same in build, test, push, bake, run (plan.only.matches)."""
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


def backend_run_options(func: F) -> F:
    """A flag for every option only one backend understands, from imagebuild/backends.py's rows (RunOption): the
    value goes to the command as a keyword named by its setting, collected into BuildSettings.backend_options, so a
    backend with options of its own is its folder and its row, not a new flag here."""
    for row in reversed(list(BACKENDS.values())):
        for option in reversed(row.options):
            func = click.option(option.flag, option.setting, metavar=option.metavar, default=None,
                                help=option.help)(func)
    return func


def compression_option(func: F) -> F:
    """--compression: how push writes layers (the choices are push/skopeo.py's; spelled here so --help loads no
    stage)."""
    return click.option("--compression", type=click.Choice(["zstd", "gzip"]), default=None,
                        help="Layer compression of the push: zstd with OCI media types (default; Docker >= 23, "
                             "containerd >= 1.5, enroot >= 3.5), or gzip with Docker media types for older "
                             "runtimes. Default: the matrix's `compression`, else zstd.")(func)


def registry_option(func: F) -> F:
    return click.option("--registry", default=None, metavar="HOST[:PORT]/PATH",
                        help="Override the matrix's `registry` (use '' for local-only tags).")(func)


def _layer_limit(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:  # click calls this for every run: without the flag, the matrix package stays unloaded
        return None
    from imagebuild.matrix.schema import parse_size  # the one size grammar (matrix size_budget / layer_limit)

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
def index_url(option: str, url: str | None) -> None:
    """An index URL given on the command line: one URL pip can be handed (no whitespace, quote, backslash or control
    character: percent-encode them), its credentials registered so no later message, log or report shows them; a
    refusal shows it masked (secrets.redact_url)."""
    if url is None or url == "none":
        return
    register_url_credentials(url)
    if not re.fullmatch(r"[^\s\"'`\\\x00-\x1f\x7f]+", url):
        raise UsageError(f"{option} {redact_url(url)!r}: not one URL (a space, quote, backslash or control character "
                         "in it: percent-encode it, e.g. %20 %22 %5C)")


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
    @click.option("--backend", type=click.Choice(choices()), default=None,
                  help="How images are built (default: the matrix's `backend`, else auto: BuildKit where the engine "
                       "(>= 23) and buildx answer, else classic; `build` says which and why; other commands plan with "
                       "the backend the record names). " + "; ".join(f"{s.name}: {s.summary}" for s in BACKENDS.values())
                       + ".")
    @functools.wraps(func)
    def wrapper(*args: Any, ca_certs: tuple[Path, ...], pip_index_url: str | None, pip_extra: tuple[str, ...],
                torch_index_url: str | None, wheelhouse: Path | None, backend: str | None, **kwargs: Any) -> Any:
        for option, url in (("--pip-index-url", pip_index_url), *(("--pip-extra-index-url", u) for u in pip_extra),
                            ("--torch-index-url", torch_index_url)):
            index_url(option, url)
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




def no_empty_key(envvar: str, what: str) -> Callable[[click.Context, click.Parameter, str | None], str | None]:
    """A key option's callback: an empty value (`--verify-key ""`, an unset CI variable that expanded to nothing) or
    an empty environment variable behind it is one usage error, never "no key" (which would skip a check or a
    signature). Click itself reads an empty variable as unset, so the variable is looked at here."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        flag = param.opts[0]
        choices = f"give {what} (a FILE or a KMS URI such as awskms://...)"
        from_env = ctx.get_parameter_source(str(param.name)) == click.core.ParameterSource.ENVIRONMENT
        if value is not None and not value.strip() and not from_env:
            raise UsageError(f"{flag} {value!r}: empty; {choices}, or leave {flag} out")
        env = os.environ.get(envvar)
        if (value is None or from_env) and env is not None and not env.strip():
            raise UsageError(f"{envvar} is set but empty; {choices}, or unset {envvar}")
        return value

    return callback


def sign_options(func: F) -> F:
    """--sign-key / --sign-password-stdin (push, build --push): what signs every pushed digest."""
    func = click.option("--sign-password-stdin", is_flag=True,
                        help="Read the signing key's password from standard input (default: COSIGN_PASSWORD).")(func)
    return click.option(
        "--sign-key", "sign_key", default=None, metavar="FILE|KMS-URI", envvar="IMAGEBUILD_SIGN_KEY",
        callback=no_empty_key("IMAGEBUILD_SIGN_KEY", "the cosign private key (cosign.key)"),
        help="Sign every pushed digest with this cosign key (a cosign.key file, its password from COSIGN_PASSWORD "
             "or --sign-password-stdin; or a KMS URI such as awskms://..., hashivault://...) and attach its "
             "CycloneDX SBOM and SLSA provenance as signed attestations (env IMAGEBUILD_SIGN_KEY).")(func)


def sign_password(sign_key: str | None, from_stdin: bool, registry_password_stdin: bool = False) -> str | None:
    """The key's password from stdin when asked (None: cosign's COSIGN_PASSWORD, read by sign.keys)."""
    from imagebuild.errors import UsageError

    if not from_stdin:
        return None
    if not sign_key:
        raise UsageError("--sign-password-stdin needs --sign-key")
    if registry_password_stdin:
        raise UsageError("--password-stdin and --sign-password-stdin both read standard input: give the key's "
                         "password in COSIGN_PASSWORD instead")
    import sys

    from imagebuild.oci import read_password_stdin

    try:
        return read_password_stdin(sys.stdin)
    except UsageError:
        raise UsageError("--sign-password-stdin: nothing on standard input") from None


def verify_key_option(func: F) -> F:
    """--verify-key (run, export, slurm): check the image's signature and attestations first."""
    return click.option(
        "--verify-key", "verify_key", default=None, metavar="FILE|KMS-URI",
        callback=no_empty_key("IMAGEBUILD_VERIFY_KEY", "the cosign public key (cosign.pub)"),
        help="Start/export only an image whose registry digest is signed with this cosign public key and carries "
             "its SBOM and provenance attestations (default: $IMAGEBUILD_VERIFY_KEY; unset: no check; empty: an error).")(func)


def platform_choice(value: str | None) -> str | None:
    """--platform as the plan names platforms (`arm64` -> linux/arm64); a usage error naming the choices."""
    if value is None:
        return None
    from imagebuild.compat import load as load_tables

    tables = load_tables()
    full = tables.platform(value)
    if full is None:
        raise UsageError(f"--platform {value!r}: not a platform this project builds; valid choices: "
                         + ", ".join(tables.platform_names))
    return full
