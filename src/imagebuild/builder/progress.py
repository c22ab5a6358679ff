"""What a person sees while the plan builds.

On a terminal: a rich live table (image, state — waiting / building step k of n / up to date / failed —, elapsed).
With `--plain` or without a TTY (CI): one line per event. Either way a summary table at the end (tag, result, time,
size). `-v` streams the build output. Every method is thread-safe (builds run in worker threads).
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from imagebuild.models import ImageResult
from imagebuild.units import format_size

if TYPE_CHECKING:
    from rich.live import Live

STYLES = {
    "waiting": "dim",
    "bootstrapping": "cyan",
    "pulling": "cyan",
    "building": "yellow",
    "built": "green",
    "up-to-date": "green",
    "failed": "bold red",
    "not-built": "red",
    "skipped": "dim",
    "interrupted": "red",
}


def human_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}m{s:02d}s" if m else f"{seconds:.1f}s"


@dataclass
class _Row:
    tag: str
    name: str
    state: str = "waiting"
    detail: str = ""
    started: float | None = None
    ended: float | None = None

    def elapsed(self) -> float | None:
        if self.started is None:
            return None
        return (self.ended or time.monotonic()) - self.started


@dataclass
class Progress:
    """Plain, line-per-event progress. `LiveProgress` overrides the display."""

    verbose: bool = False
    console: Console = field(default_factory=lambda: Console(file=sys.stdout, width=None if sys.stdout.isatty()
                                                             else 200, highlight=False))
    rows: dict[str, _Row] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _t0: float = field(default_factory=time.monotonic)

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def start(self, images: list[tuple[str, str]]) -> None:
        """images: (tag, display name) in plan order."""
        with self._lock:
            for tag, name in images:
                self.rows[tag] = _Row(tag, name)

    def stop(self) -> None:
        pass

    # -- events --------------------------------------------------------------------------------------------------
    def set(self, tag: str, state: str, detail: str = "") -> None:
        with self._lock:
            row = self.rows.setdefault(tag, _Row(tag, tag))
            now = time.monotonic()
            if state in ("building", "bootstrapping", "pulling") and row.started is None:
                row.started = now
            if state in ("built", "up-to-date", "failed", "not-built", "skipped", "interrupted"):
                row.ended = now
                if row.started is None:
                    row.started = now
            row.state, row.detail = state, detail
            self._event(row)

    def step(self, tag: str, k: int, n: int, instr: str) -> None:
        """A Dockerfile step ("step 8/9: WORKDIR /workspace"), or with `n` 0 a phase that has no step (BuildKit's
        "exporting layers", "writing archive", "loading into the engine"): the row shows what runs now."""
        instr = " ".join(instr.split())
        if len(instr) > 100:
            instr = instr[:97] + "..."
        self.set(tag, "building", f"step {k}/{n}: {instr}" if n else instr)

    def line(self, tag: str, text: str) -> None:
        if self.verbose:
            with self._lock:
                self._print(f"  {self.rows[tag].name if tag in self.rows else tag} | {text}", style="dim")

    def note(self, text: str, style: str = "yellow") -> None:
        with self._lock:
            self._print(text, style=style)

    def failure(self, result: ImageResult, tail: str) -> None:
        with self._lock:
            self._print(f"FAILED {result.tag}", style="bold red")
            self._print(f"  {result.error}", style="red")
            if tail:
                self._print("  last lines of the build output:", style="red")
                for ln in tail.splitlines():
                    self._print(f"    {ln}")
            if result.log_path:
                self._print(f"  full log: {result.log_path}", style="red")

    # -- summary -------------------------------------------------------------------------------------------------
    def summary(self, results: list[ImageResult]) -> None:
        table = Table(title="build summary", title_justify="left", show_lines=False,
                      box=box.SIMPLE if type(self) is Progress else box.ROUNDED)
        for col in ("tag", "result", "time", "size"):
            table.add_column(col, justify="right" if col in ("time", "size") else "left", no_wrap=col != "tag",
                             overflow="fold" if col == "tag" else "ellipsis")
        for r in results:
            table.add_row(r.tag, Text(r.status, style=STYLES.get(r.status, "")), human_time(r.build_seconds),
                          format_size(r.size))
        with self._lock:
            self.console.print(table)
            counts: dict[str, int] = {}
            for r in results:
                counts[r.status] = counts.get(r.status, 0) + 1
            total = time.monotonic() - self._t0
            self.console.print(", ".join(f"{n} {s}" for s, n in counts.items()) + f" in {human_time(total)}",
                               highlight=False)

    # -- display -------------------------------------------------------------------------------------------------
    def _event(self, row: _Row) -> None:
        stamp = human_time(time.monotonic() - self._t0)
        elapsed = f" ({human_time(row.elapsed())})" if row.state in ("built", "failed", "up-to-date") else ""
        detail = f": {row.detail}" if row.detail else ""
        self._print(f"[{stamp:>7}] {row.name} {row.state}{detail}{elapsed}")

    def _print(self, text: str, style: str | None = None) -> None:
        self.console.print(Text(text, style=style or ""), soft_wrap=True, highlight=False)


class LiveProgress(Progress):
    """A rich live table on a terminal."""

    def __init__(self, verbose: bool = False, console: Console | None = None):
        super().__init__(verbose=verbose, console=console or Console(file=sys.stderr))
        self._live: Live | None = None

    def start(self, images: list[tuple[str, str]]) -> None:
        from rich.live import Live  # a terminal's live view only: --plain (and no TTY) never loads it

        super().start(images)
        self._live = Live(self, console=self.console, refresh_per_second=4, transient=False)
        self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
            self._live = None

    def _event(self, row: _Row) -> None:  # the table shows it
        pass

    def _print(self, text: str, style: str | None = None) -> None:
        self.console.print(Text(text, style=style or ""), soft_wrap=True, highlight=False)

    def __rich__(self) -> Table:
        table = Table(box=None, show_header=True, header_style="bold")
        table.add_column("image", no_wrap=True)
        table.add_column("state", no_wrap=True)
        table.add_column("elapsed", justify="right")
        with self._lock:
            for row in self.rows.values():
                detail = row.detail if len(row.detail) <= 70 else row.detail[:67] + "..."
                state = Text(row.state.replace("-", " "), style=STYLES.get(row.state, ""))
                if detail:
                    state.append(f"  {detail}", style="dim")
                table.add_row(row.name, state, human_time(row.elapsed()))
        return table


def make_progress(plain: bool = False, verbose: bool = False) -> Progress:
    if plain or not sys.stderr.isatty():
        return Progress(verbose=verbose)
    return LiveProgress(verbose=verbose)
