"""Errors and exit codes shared by every command.

Exit codes: 0 success; 1 a build/test/push failed or no Docker engine answers; 2 bad input (matrix, options);
130 interrupted.
"""

from __future__ import annotations

from dataclasses import dataclass

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input file: rendered as `FILE:LINE: key.path: message; choices`."""

    file: str
    line: int
    keypath: str
    message: str
    choices: str = ""  # "valid choices: a, b, c" / "did you mean 'torch'?"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        text = f"{where}: {self.keypath}: {self.message}" if self.keypath else f"{where}: {self.message}"
        return f"{text}; {self.choices}" if self.choices else text


class ImagebuildError(Exception):
    """Base class; `exit_code` tells the CLI how to exit."""

    exit_code = EXIT_FAILED


SHOWN_PROBLEMS = 40  # a file with thousands of problems lists these many, then says how many more (as compilers do)


class MatrixError(ImagebuildError):
    """All problems found in one matrix file (reported together, not only the first; `problems` holds every one,
    the message the first SHOWN_PROBLEMS and a count of the rest)."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        lines = [str(p) for p in self.problems[:SHOWN_PROBLEMS]]
        if len(self.problems) > SHOWN_PROBLEMS:
            more = len(self.problems) - SHOWN_PROBLEMS
            lines.append(f"{self.problems[0].file}: ... and {more} more problem{'s' if more > 1 else ''} "
                         f"({len(self.problems)} in all; fix these first)")
        super().__init__("\n".join(lines))


class UsageError(ImagebuildError):
    exit_code = EXIT_BAD_INPUT


class EngineUnavailable(ImagebuildError):
    """No Docker engine answers; the message says what was tried and how to start one."""

    exit_code = EXIT_FAILED
