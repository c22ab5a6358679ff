#!/usr/bin/env python3
"""The documentation's generated parts and their checks (scripts/lint.sh runs `--check`).

    python scripts/docs.py            write docs/commands.md from the click commands themselves
    python scripts/docs.py --check    fail (exit 1) when docs/commands.md is stale, when a matrix key the schema
                                      knows is not documented in docs/matrix.md, or when a link in README.md or
                                      docs/*.md does not resolve (a file, or a heading anchor in it)

Why generated: the options are described once, in the `--help` text the commands carry; a hand-kept copy in the README
drifted (56 of 79 options described twice). Why the link check: the README is a front door to docs/, and a moved
heading silently broke links before.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
COMMANDS_MD = ROOT / "docs" / "commands.md"
MATRIX_MD = ROOT / "docs" / "matrix.md"
LINKED = ("README.md", "docs/*.md", "bench/*.md")

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|````)")


def _option_row(param: click.Parameter, ctx: click.Context) -> tuple[str, str]:
    record = param.get_help_record(ctx)
    if record is None:
        return "", ""
    names, text = record
    return names, text


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_commands() -> str:
    """Markdown for every command the CLI lists, in its own order, from the commands' help texts and options."""
    from imagebuild.cli import cli

    group_ctx = click.Context(cli, info_name="imagebuild")
    lines = [
        "# Command reference",
        "",
        "Generated from the commands themselves by `python scripts/docs.py` (lint fails when this file is stale).",
        "`imagebuild COMMAND --help` prints the same text. Exit codes: [README](../README.md#exit-codes).",
        "",
    ]
    names = cli.list_commands(group_ctx)
    lines += ["| command | what it does |", "|---|---|"]
    for name in names:
        cmd = cli.get_command(group_ctx, name)
        assert cmd is not None
        lines.append(f"| [`{name}`](#imagebuild-{name}) | {_md_cell(cmd.get_short_help_str(120))} |")
    lines.append("")
    for name in names:
        cmd = cli.get_command(group_ctx, name)
        assert cmd is not None
        ctx = click.Context(cmd, info_name=name, parent=group_ctx)
        lines += [f"## imagebuild {name}", "", "```text", cmd.get_usage(ctx).strip(), "```", ""]
        help_text = inspect.cleandoc(cmd.help or "")
        if help_text:
            kept = [line for line in help_text.splitlines() if line.strip() != "\b"]
            lines += ["```text", *kept, "```", ""]
        # the help option is every command's and says nothing; click caches it per command with the names of the
        # context it was first made in ("--help", or "-h, --help" after a CLI run), so it is left out by identity
        rows = [_option_row(p, ctx) for p in cmd.get_params(ctx) if p is not cmd.get_help_option(ctx)]
        rows = [r for r in rows if r[0]]
        if rows:
            lines += ["| option | meaning |", "|---|---|"]
            lines += [f"| `{_md_cell(names_)}` | {_md_cell(text)} |" for names_, text in rows]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def matrix_keys() -> list[str]:
    """Every key a matrix file may hold: the top level and the variant fields (from the schema itself)."""
    from imagebuild.matrix.fields import VARIANT_FIELDS
    from imagebuild.matrix.schema import TOP_KEYS

    return list(TOP_KEYS) + list(VARIANT_FIELDS)


def undocumented_keys(text: str) -> list[str]:
    return [key for key in matrix_keys() if f"`{key}`" not in text]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*?|_(?=\w)", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def broken_links(files: list[Path]) -> list[str]:
    problems: list[str] = []
    for md in files:
        fenced = False
        for number, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
            if _FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            for target in _LINK.findall(line):
                if re.match(r"^[a-z]+:", target):  # http:, https:, mailto: — not checked offline
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (md.parent / file_part).resolve() if file_part else md
                where = f"{md.relative_to(ROOT)}:{number}"
                if not dest.exists():
                    problems.append(f"{where}: link to {target}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    problems.append(f"{where}: link to {target}: no heading with anchor #{anchor}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="check instead of writing")
    args = parser.parse_args(argv)
    generated = render_commands()
    if not args.check:
        COMMANDS_MD.write_text(generated, encoding="utf-8")
        print(f"wrote {COMMANDS_MD.relative_to(ROOT)}")
        return 0
    problems: list[str] = []
    if not COMMANDS_MD.exists() or COMMANDS_MD.read_text(encoding="utf-8") != generated:
        problems.append(f"{COMMANDS_MD.relative_to(ROOT)} is stale: run `python scripts/docs.py`")
    missing = undocumented_keys(MATRIX_MD.read_text(encoding="utf-8")) if MATRIX_MD.exists() else matrix_keys()
    problems += [f"{MATRIX_MD.relative_to(ROOT)}: matrix key `{key}` is not documented" for key in missing]
    files = sorted({p for pattern in LINKED for p in ROOT.glob(pattern)})
    problems += broken_links(files)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
