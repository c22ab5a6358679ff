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


class MatrixError(ImagebuildError):
    """All problems found in one matrix file (reported together, not only the first)."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class UsageError(ImagebuildError):
    exit_code = EXIT_BAD_INPUT


class EngineUnavailable(ImagebuildError):
    """No Docker engine answers; the message says what was tried and how to start one."""

    exit_code = EXIT_FAILED
