"""The files enroot writes into a root filesystem when it imports an image, made from the image's config.

enroot starts a container without the image config: all it knows of ENV, WORKDIR, ENTRYPOINT/CMD, labels and
VOLUMEs is what `enroot import` wrote into the root filesystem (NVIDIA/enroot src/docker.sh, `docker::configure`).
An `.sqsh` we make must therefore carry the same files in the same form, or pyxis starts our images without their
PATH (no /opt/venv/bin), in the wrong directory and without tini:

- /etc/environment: every ENV entry of the config, one `KEY=VALUE` a line, in the config's order (enroot reads it
  at start and sets those variables over the host's);
- /etc/fstab: one line per VOLUME, a bind of a directory inside the container's rootfs
  (`${ENROOT_ROOTFS}/path /path none x-create=dir,bind,rw,nosuid,nodev`);
- /etc/rc: a provenance comment, the labels as comments, then a shell script that enters WORKDIR, sources
  /etc/rc.local when it is not empty and execs ENTRYPOINT with the arguments given, else ENTRYPOINT + CMD
  (`/bin/sh` when the image has neither), words single-quoted;
- /etc/rc.local: a comment only (a hook users may fill).

The provenance names the image by ID, not by the tag it was exported under, so one image always gives one file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ENVIRONMENT = "etc/environment"
FSTAB = "etc/fstab"
RC = "etc/rc"
RC_LOCAL = "etc/rc.local"


@dataclass(frozen=True)
class EnrootFiles:
    """The files, relative to the rootfs, and the working directory enroot creates."""

    files: dict[str, str]
    workdir: str  # "/" when the image sets none


def quote(word: str) -> str:
    """A word as bash's `${x@Q}` writes it for ordinary text: always single quotes, `'` as `'\\''`."""
    return "'" + word.replace("'", "'\\''") + "'"


def _config(inspect: dict[str, Any]) -> dict[str, Any]:
    return dict(inspect.get("Config") or inspect.get("config") or {})


def environment(config: dict[str, Any]) -> str:
    return "".join(f"{entry}\n" for entry in config.get("Env") or [])


def fstab(config: dict[str, Any]) -> str:
    volumes = sorted((config.get("Volumes") or {}).keys())
    return "".join(f"${{ENROOT_ROOTFS}}{v} {v} none x-create=dir,bind,rw,nosuid,nodev\n" for v in volumes)


def rc(config: dict[str, Any], provenance: str) -> str:
    lines = [f"# enroot-provenance: {provenance}"]
    for key, value in sorted((config.get("Labels") or {}).items()):
        lines.append(f"# {key} {str(value).replace(chr(10), ' ')}")
    lines.append("")
    workdir = config.get("WorkingDir") or "/"
    entrypoint = [str(w) for w in config.get("Entrypoint") or []]
    cmd = [str(w) for w in config.get("Cmd") or []]
    if not entrypoint and not cmd:
        cmd = ["/bin/sh"]
    ep = " ".join(quote(w) for w in entrypoint)
    both = " ".join(quote(w) for w in [*entrypoint, *cmd])
    lines += [
        f'mkdir -p "{workdir}" 2> /dev/null',
        f'cd "{workdir}" && unset OLDPWD || exit 1',
        "",
        "if [ -s /etc/rc.local ]; then",
        "    . /etc/rc.local",
        "fi",
        "",
        "if [ $# -gt 0 ]; then",
        f'    exec {ep} "$@"' if ep else '    exec "$@"',
        "else",
        f"    exec {both}",
        "fi",
    ]
    return "\n".join(lines) + "\n"


RC_LOCAL_TEXT = ("# Sourced by /etc/rc before the container's command starts (enroot layout);\n"
                 "# commands here can change the environment or the entrypoint.\n")


def enroot_files(inspect: dict[str, Any], provenance: str) -> EnrootFiles:
    """The four files for an image's inspect data (`Config` as the engine reports it)."""
    config = _config(inspect)
    return EnrootFiles(
        files={ENVIRONMENT: environment(config), FSTAB: fstab(config), RC: rc(config, provenance),
               RC_LOCAL: RC_LOCAL_TEXT},
        workdir=str(config.get("WorkingDir") or "/"),
    )


def parse_environment(text: str) -> dict[str, str]:
    """/etc/environment as enroot reads it: `KEY=VALUE` lines (what the integration test and the probe start with)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key and not key.startswith("#"):
            out[key] = value
    return out
