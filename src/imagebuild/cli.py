"""The `imagebuild` command group. Each subcommand lives in its own module under imagebuild/commands/."""

from __future__ import annotations

import importlib
import sys

import click

from imagebuild import __version__
from imagebuild.errors import EXIT_INTERRUPTED, ImagebuildError

# command name -> module under imagebuild.commands exposing a click command named `command`
COMMANDS = ("validate", "plan", "render", "lock", "build", "test", "push", "report", "bake", "refresh",
            "catalog", "run", "sbom", "diff", "export", "slurm", "verify", "coverage", "audit",
            "devcontainer")


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if self.get_command(ctx, name) is not None]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        try:
            module = importlib.import_module(f"imagebuild.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"imagebuild.commands.{name}":
                return None
            raise
        command: click.Command = module.command
        return command


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="imagebuild")
def cli() -> None:
    """Build validated, tested PyTorch + CUDA images from a YAML version matrix.

    \b
    Example:
      imagebuild validate --matrix images/h100.yaml
      imagebuild plan --matrix h100.yaml
      imagebuild build --matrix images/cpu.yaml --wheelhouse /opt/wheels
    """


def error_lines(text: str) -> str:
    """Every line of an error as `error: ...`, whatever it starts with (a path, a FILE:LINE, a reference), so a CI
    log grep for `^error: ` finds them all; continuation lines (indented) stay as they are."""
    out = []
    for line in text.splitlines() or [""]:
        out.append(line if line.startswith((" ", "\t")) or line.startswith("error: ") else f"error: {line}")
    return "\n".join(out)


def main() -> None:
    try:
        rv = cli.main(standalone_mode=False)
    except ImagebuildError as exc:
        click.echo(error_lines(str(exc)), err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as exc:  # bad options: the usage line, then the same `error:` form
        ctx = getattr(exc, "ctx", None)
        if ctx is not None:
            click.echo(ctx.get_usage(), err=True)
            click.echo(f"Try '{ctx.command_path} {ctx.help_option_names[0]}' for help.", err=True)
        click.echo(error_lines(exc.format_message()), err=True)
        sys.exit(exc.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)
