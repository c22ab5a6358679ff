"""buildx rawjson progress -> seam events, on streams recorded from `docker buildx build --progress rawjson`
(buildx 0.13.1, dockerd 26.1.5; fixtures/buildx/)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

from imagebuild.builder.backends.buildkit.progress import RawJsonProgress
from imagebuild.secrets import register_secret

FIXTURES = Path(__file__).parent / "fixtures" / "buildx"


def _feed_in_pieces(progress: RawJsonProgress, text: str, size: int = 97):
    events = []
    for i in range(0, len(text), size):  # objects split across reads, as a pipe delivers them
        events += progress.feed(text[i:i + size])
    return events


def test_failed_run_names_the_failing_step_its_reason_and_its_own_tail():
    log = io.StringIO()
    progress = RawJsonProgress(log=log)
    events = _feed_in_pieces(progress, (FIXTURES / "failed-run.rawjson").read_text())
    events += progress.finish(1)
    assert progress.failed
    summary = progress.failure_summary()
    assert summary.startswith("[pip 1/2] RUN echo collecting six")
    assert "exit code: 3" in summary
    # the failing stage's output only, not the parallel stage's lines
    assert progress.tail_text().splitlines() == ["collecting six", "ERROR: no matching distribution"]
    assert "exit code: 3" in log.getvalue() and "collecting six" in log.getvalue()


def test_steps_and_lines_of_a_successful_build():
    progress = RawJsonProgress()
    events = _feed_in_pieces(progress, (FIXTURES / "built.rawjson").read_text())
    events += progress.finish(0)
    assert not progress.failed
    steps = [(e.step, e.steps, e.text) for e in events if e.kind == "step"]
    assert [s for s in steps if s[0] is not None] == [(1, 2, "RUN echo built ok")]
    # after the last step: the phases of "exporting to image", each once, without a step number
    assert [s for s in steps if s[0] is None] == [(None, None, "exporting layers"),
                                                  (None, None, "exporting the image manifest"),
                                                  (None, None, "unpacking into the engine's store")]
    assert steps.index((1, 2, "RUN echo built ok")) < steps.index((None, None, "exporting layers"))
    assert [e.text for e in events if e.kind == "line"] == ["built ok"]


def test_every_phase_of_an_archive_export_shows():
    """The docker driver on the containerd store exports a re-timestamped archive (rewrite-timestamp=true) and a
    registry cache: the minutes that takes show as phases, not as the last Dockerfile step."""
    progress = RawJsonProgress(log=(log := io.StringIO()))
    ids = ["exporting layers", "rewriting layers with source-date-epoch 1764547200 (2 layers)", "exporting layers",
           "exporting manifest sha256:09c8", "exporting config sha256:c212", "sending tarball",
           "preparing build cache for export", "writing cache manifest sha256:aa", "something new"]
    events = progress.feed("".join(json.dumps({"statuses": [{"id": i, "vertex": "sha256:e"}]}) + "\n" for i in ids))
    assert [(e.kind, e.step, e.text) for e in events] == [
        ("step", None, "exporting layers"), ("step", None, "re-timestamping layers (SOURCE_DATE_EPOCH)"),
        ("step", None, "exporting the image manifest"), ("step", None, "writing archive"),
        ("step", None, "exporting the registry cache")]
    assert "writing archive" in log.getvalue()


def test_a_tolerated_vertex_error_with_exit_0_is_no_failure():
    """Measured: `--cache-from type=registry` of a cache not exported yet: BuildKit marks the import vertex with
    an error, builds, and buildx exits 0; the same stream with a failing exit makes that vertex the cause."""
    stream = ('{"vertexes": [{"digest": "c1", "name": "importing cache manifest from 127.0.0.1:5000/c:t", '
              '"started": "t", "completed": "t", "error": "failed to configure registry cache importer: '
              '127.0.0.1:5000/c:t: not found"}]}\n'
              '{"vertexes": [{"digest": "r1", "name": "[1/2] RUN echo ok", "started": "t", "completed": "t"}]}\n')
    progress = RawJsonProgress()
    events = progress.feed(stream) + progress.finish(0)
    assert not progress.failed and not any(e.kind == "error" for e in events)
    assert any("registry cache importer" in e.text for e in events if e.kind == "line")
    progress = RawJsonProgress()
    progress.feed(stream)
    progress.finish(1)
    assert progress.failure_summary().startswith("importing cache manifest from 127.0.0.1:5000/c:t: failed")


def test_plain_error_after_the_json_fails_the_build_when_no_vertex_did():
    progress = RawJsonProgress()
    progress.feed('{"vertexes": [{"digest": "d1", "name": "[internal] load build definition", '
                  '"started": "t"}]}\nERROR: failed to solve: invalid reference format\n')
    progress.finish(1)
    assert progress.error == "failed to solve: invalid reference format"
    assert progress.failure_summary().startswith("before the first Dockerfile step")


def test_nonzero_exit_without_any_message_still_fails():
    progress = RawJsonProgress()
    progress.finish(137)
    assert progress.error == "docker buildx build exited with status 137"


def test_log_lines_are_redacted_and_split_across_messages():
    register_secret("hunter2-token")
    log = io.StringIO()
    progress = RawJsonProgress(log=log)

    def logs(data: bytes) -> str:
        return json.dumps({"logs": [{"vertex": "v", "stream": 1, "data": base64.b64encode(data).decode()}]})

    events = progress.feed(logs(b"url https://u:hunter2-token@") + logs(b"idx/simple\nnext"))
    assert [e.text for e in events] == ["url https://u:***@idx/simple"]
    assert "hunter2-token" not in log.getvalue()
    assert progress.vertexes["v"].partial == "next"


def test_a_phase_replaces_the_last_step_on_the_image_s_row():
    """The CPU runtime sat at "step 8/9: WORKDIR /workspace" for 2.5 minutes while BuildKit exported its layers."""
    from rich.console import Console

    from imagebuild.builder.progress import Progress

    shown = io.StringIO()
    progress = Progress(console=Console(file=shown, width=200))
    progress.start([("ml/t:1-runtime", "runtime")])
    progress.step("ml/t:1-runtime", 8, 9, "WORKDIR /workspace")
    assert progress.rows["ml/t:1-runtime"].detail == "step 8/9: WORKDIR /workspace"
    for phase in ("exporting layers", "writing archive", "loading into the engine"):
        progress.step("ml/t:1-runtime", 0, 0, phase)
        assert progress.rows["ml/t:1-runtime"].detail == phase
