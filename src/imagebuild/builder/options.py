"""What a caller can ask of a build run (BuildOptions).

Kept apart from the executor so the command layer and tests can build options without importing the scheduler.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.backends import CLASSIC

if TYPE_CHECKING:
    from imagebuild.record.derived import Derived


def default_jobs() -> int:
    return max(2, min(4, (os.cpu_count() or 2) // 2))


@dataclass
class BuildOptions:
    jobs: int = field(default_factory=default_jobs)
    force: bool = False
    only: tuple[str, ...] = ()  # fnmatch patterns on tag, short tag or id
    keep_going: bool = False
    log_dir: Path = Path("reports/logs")  # what the CLI defaults to
    created: str | None = None  # CREATED build arg: a date or "now"; default: each image's source date (sourcedate.py)
    revision: str | None = None  # REVISION build arg; default: `git rev-parse HEAD` or "unknown"
    proxies: dict[str, str] | None = None  # None: HTTP(S)_PROXY/NO_PROXY (+ lowercase) from the environment
    check_disk: bool = True
    force_bootstrap: bool = False
    bootstrap_workdir: Path | None = None
    tag_aliases: bool = True
    build_timeout: int = 6 * 3600  # seconds without a byte from the engine before a build counts as lost
    on_warning: Callable[[str], None] | None = None
    remote: dict[str, Any] = field(default_factory=dict[str, Any])  # planned tag -> remote.RemoteImage: up to date in the registry
    backend: str = CLASSIC  # which build backend builds the images (a row of imagebuild/backends.py)
    kept: Derived | None = None  # what the state keeps per image ID (record/derived.py): the history describe reads
