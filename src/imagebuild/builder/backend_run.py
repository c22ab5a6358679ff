"""One backend build inside a run: registered so an interrupt can cancel it, its steps and lines shown on the image's
progress row. Shared by the image build (one_image.py) and the TE wheel build (te_cache.py), which otherwise do not
know each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imagebuild.builder.backend import BuildOutcome, BuildRequest

if TYPE_CHECKING:
    from imagebuild.builder.state import RunState


def run_build(run: RunState, request: BuildRequest, tag: str, key: str | None = None,
              step_prefix: str = "") -> BuildOutcome:
    """One backend build, registered under `key` (default `tag`) so an interrupt can cancel it, its steps and lines
    shown on `tag`'s progress row; returns how it ended."""
    key = key or tag
    build = run.backend.start(request)
    with run.lock:
        run.builds[key] = build
    if run.cancel.is_set():  # interrupted before the build was registered
        build.cancel()
    try:
        for ev in build.events():
            if ev.kind == "step":
                run.progress.step(tag, ev.step or 0, ev.steps or 0, step_prefix + ev.text)
            elif ev.kind == "line":
                run.progress.line(tag, ev.text)
    finally:
        with run.lock:
            run.builds.pop(key, None)
    return build.outcome()

