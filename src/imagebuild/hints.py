"""Hints that name only options the running command has (issue 39, item 7).

A message made by shared code (the registry client, push, the key checks) is printed by several commands, and not
all of them have the option a hint would name: `verify` has no --username, `run --verify-key` no --ca-file,
`build --push` no --untested. `has_option` asks the running click command; `either` words the alternatives that
remain. Outside a command (library use, a unit test calling the code directly) every option counts as present.
tests/unit/test_truthful_messages.py walks the commands' hints.
"""

from __future__ import annotations

import click


def has_option(option: str) -> bool:
    """Does the command being run have `option` (e.g. "--ca-file")? True outside a click command."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return True
    return any(option in param.opts or option in param.secondary_opts for param in ctx.command.params)


def either(*choices: str, options: tuple[str, ...] = ()) -> str:
    """`a, b or c` of the choices whose options the running command has: each choice is text, and `options` names,
    in the same order, the option each one needs ("" for one that needs none)."""
    kept = [c for i, c in enumerate(choices) if i >= len(options) or not options[i] or has_option(options[i])]
    return kept[0] if len(kept) == 1 else ", ".join(kept[:-1]) + " or " + kept[-1]


def ca_hint(registry: str) -> str:
    """Where the CA of a TLS registry goes."""
    return either("--ca-file", f"/etc/docker/certs.d/{registry}/ca.crt", options=("--ca-file", ""))


def credentials_hint() -> str:
    """How to give registry credentials."""
    return either("docker login", "--username/--password-stdin", "IMAGEBUILD_REGISTRY_USER/IMAGEBUILD_REGISTRY_PASSWORD",
                  options=("", "--password-stdin", ""))
