"""The per-image build log files (reports/logs/<image id>.log): opened here for every backend and the TE wheel
build alike, so no stage reaches into a backend's stream parser for them."""

from __future__ import annotations

from pathlib import Path
from typing import IO

from imagebuild.files import open_fresh_text


def open_log(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open_fresh_text(path)  # never through a link planted in the log folder


def write_log(log: IO[str] | None, text: str) -> None:
    """Append to an image's log; a log that cannot be written (disk full, closed) never fails the build."""
    if log is None:
        return
    try:
        log.write(text)
        log.flush()
    except (OSError, ValueError):
        pass
