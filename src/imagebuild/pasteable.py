"""Lines the tool prints for a person to paste (srun, sbatch, docker run, apptainer, enroot): ONE home for how a value
is written for the program that will read it, so that what is pasted runs exactly what was printed and nothing else.

- A shell word (`shell_join`, `shell_lines`): POSIX single quoting (shlex), which bash, sh and zsh read back as the
  same one word whatever it holds (`$(…)`, spaces, quotes, newlines). A value that is not text (bytes a file name held
  that are not UTF-8) cannot be printed faithfully: refused, naming the option.
- An `#SBATCH` header value (`sbatch_value`): sbatch does not read these lines with a shell. Its own parser (Slurm's
  src/sbatch/opt.c, `_get_argument`) splits at whitespace, groups with '…' or "…", takes `\\x` as x and starts a
  comment at an unquoted `#`; and a newline ends the line, after which the next line is no longer an option (a line
  that is not a comment ends the header, so every later #SBATCH line would be ignored). So a value is written bare
  when it is plain, else in double quotes with `"` and `\\` escaped; a control character is refused.
- A file argument (`file_argument`): absolute, so a program that takes a name *or* a path reads it as a path (pyxis'
  `--container-image` reads a value as a file only when it starts with `.` or `/`; anything else is a registry image
  that anyone could publish under that name).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Sequence

from imagebuild.errors import UsageError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SBATCH_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def printable(option: str, value: str) -> str:
    """`value` when it can be printed as the text it is (UTF-8); else one UsageError naming `option`."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{option} {ascii(value)}: not UTF-8 text; it cannot be printed as a line to paste") from None
    return value


def shell_word(value: str, option: str = "value") -> str:
    return shlex.quote(printable(option, value))


def shell_join(argv: Iterable[str], option: str = "value") -> str:
    """One line that a POSIX shell splits back into exactly `argv`."""
    return " ".join(shell_word(a, option) for a in argv)


def shell_lines(groups: Sequence[Sequence[str]], option: str = "value") -> str:
    """`groups` (an argv cut into readable pieces) one per line, joined by backslash-newline continuations: the shell
    removes each continuation before splitting, so the argv is the concatenation of the groups."""
    return " \\\n    ".join(shell_join(g, option) for g in groups if g)


def sbatch_value(option: str, value: str) -> str:
    """`value` written for an `#SBATCH --option=VALUE` line as sbatch's header parser reads it back (see above)."""
    printable(option, value)
    if not value or _CONTROL.search(value):
        what = "is empty" if not value else f"holds a control character ({ascii(_CONTROL.findall(value)[0])})"
        raise UsageError(f"{option} {ascii(value)}: {what}: an #SBATCH line cannot hold it (a newline would end the "
                         "header and sbatch would ignore every option after it)")
    if _SBATCH_PLAIN.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def file_argument(path: str, option: str = "path") -> str:
    """`path` absolute (not resolved: a link the user named stays the link), so it is never read as a name."""
    return os.path.abspath(printable(option, path))
