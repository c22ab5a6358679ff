"""The builder seam: what the executor needs from a way of building ONE image, and nothing more.

In the style of cibuildwheel's platform modules: the executor (schedule.py, one_image.py) decides what to build, in
which order, on which parent image ID, and whether an image is already up to date; a backend only turns one request
(the rendered Dockerfile, its context files, build args, labels, the parent's image ID, a tag) into one image
in the image store (engine/store.py), streams what happens while
it does, and stops when asked. A backend never reads the plan, the matrix or the run's options, so another builder
(a remote cluster, podman) is one new folder under backends/ and one row of imagebuild/backends.py's table, not an
edit across the executor.

Contract:
- `start(request)` does no I/O; the build begins when `events()` is iterated and ends when the iterator is exhausted.
- `events()` never raises for a failed build: an engine error, an error chunk in an HTTP-200 stream, a lost
  connection all end the stream with an `error` event, and `outcome()` reports the failure.
- `cancel()` may be called from any thread, before or during `events()`; the build then ends as failed.
- `cleanup()` removes what cancelled builds left behind on the engine (the classic builder's intermediate
  containers) and may be called repeatedly while builds wind down.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal, Protocol

from imagebuild.models import DEFAULT_PLATFORM
from imagebuild.phases import Phase

EventKind = Literal["step", "line", "container", "image", "error"]


@dataclass(frozen=True)
class BuildEvent:
    """One thing that happened during a build.

    step: `text` is the instruction, `step`/`steps` the position ("Step 4/9"); line: one line of output (redacted);
    container: an intermediate container was started (its ID); image: the image ID is known; error: the build failed.
    """

    kind: EventKind
    text: str = ""
    step: int | None = None
    steps: int | None = None


@dataclass(frozen=True)
class BuildRequest:
    """Build one image. Everything is already decided: the backend passes it on, it adds no build args or labels.

    The backend assembles the build arguments as `{**build_args, **parents, **secret_build_args}`; secret values
    (index credentials) come separately so a backend that can mount secrets may do so, and never reach a log."""

    tag: str  # the target tag
    dockerfile: str  # the rendered Dockerfile text
    build_args: Mapping[str, str]  # not secret
    labels: Mapping[str, str]
    timeout: int  # seconds without a byte from the builder before the build counts as lost
    parents: Mapping[str, str] = field(default_factory=dict)  # build arg -> parent image ID (BASE_IMAGE)
    secret_build_args: Mapping[str, str] = field(default_factory=dict)
    context_files: Mapping[str, bytes] = field(default_factory=dict)  # relative path -> bytes
    context_dirs: Mapping[str, Path] = field(default_factory=dict)  # context path -> host folder
    network: str = "host"  # "host" or "none": never a bridge network
    log: IO[str] | None = None  # the image's log: the backend appends the whole output, redacted
    # the image's OS/architecture. The classic backend builds only the engine's own (the pipeline refuses a plan of
    # another before anything builds); BuildKit builds any its builder has, natively or through QEMU.
    platform: str = DEFAULT_PLATFORM

    def all_build_args(self) -> dict[str, str]:
        return {**self.build_args, **self.parents, **self.secret_build_args}


@dataclass(frozen=True)
class BuildOutcome:
    """How a build ended: an image ID, or one paragraph saying which step failed and why; its timed phases."""

    image_id: str | None  # full ID ("sha256:...") when built
    error: str | None = None  # failing step + reason
    tail: str = ""  # the last lines of output, for the failure report
    # where the build's time went, as the backend saw it (phases.py: steps, cached or not, export, re-timestamping);
    # a failed build's too, as far as it got
    phases: tuple[Phase, ...] = field(default=(), compare=False)

    @property
    def failed(self) -> bool:
        return self.error is not None


class RunningBuild(Protocol):
    def events(self) -> Iterator[BuildEvent]:
        """Run the build, yielding its events until it ends (iterate once)."""
        ...

    def cancel(self) -> None:
        """Stop the build (thread-safe; the events end with an `error` event saying "interrupted")."""
        ...

    def outcome(self) -> BuildOutcome:
        """After `events()` is exhausted: the image ID or the failure."""
        ...


class BuildBackend(Protocol):
    def start(self, request: BuildRequest) -> RunningBuild:
        """A handle for building `request`; nothing is sent until its events are iterated."""
        ...

    def cleanup(self, warn: Callable[[str], None]) -> list[str]:
        """Remove what cancelled builds left on the engine; returns what was removed, `warn`s about the rest."""
        ...
