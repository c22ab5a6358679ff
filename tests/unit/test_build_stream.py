"""Build stream parsing: errors arrive as chunks under HTTP 200 and must fail the image."""

from __future__ import annotations

import io

from imagebuild.builder.backends.classic.stream import BuildStream
from imagebuild.secrets import register_secret

OK_STREAM = [
    {"stream": "Step 1/3 : ARG BASE_IMAGE"},
    {"stream": "\n"},
    {"stream": "Step 2/3 : FROM ${BASE_IMAGE}"},
    {"stream": "\n"},
    {"stream": " ---> 2b1c0a6c9f1e\n"},
    {"stream": "Step 3/3 : RUN pip install torch"},
    {"stream": "\n"},
    {"stream": " ---> Running in 5f0c3e2a1b9d\n"},
    {"stream": "Collecting torch\n"},
    {"stream": "Removing intermediate container 5f0c3e2a1b9d\n"},
    {"stream": " ---> 9c8b7a6d5e4f\n"},
    {"aux": {"ID": "sha256:" + "9c8b7a6d5e4f" + "0" * 52}},
    {"stream": "Successfully built 9c8b7a6d5e4f\n"},
    {"stream": "Successfully tagged ibtest:1\n"},
]


def test_success_stream_gives_image_id_and_steps():
    s = BuildStream()
    steps = []
    for chunk in OK_STREAM:
        steps += [(e.step, e.steps, e.text) for e in s.feed(chunk) if e.kind == "step"]
    s.finish()
    assert not s.failed
    assert s.image_id == "sha256:9c8b7a6d5e4f" + "0" * 52
    assert steps == [(1, 3, "ARG BASE_IMAGE"), (2, 3, "FROM ${BASE_IMAGE}"), (3, 3, "RUN pip install torch")]
    assert s.containers == ["5f0c3e2a1b9d"]


def test_error_chunk_under_http_200_fails_with_step_and_tail():
    s = BuildStream()
    chunks = OK_STREAM[:9] + [
        {"stream": "ERROR: No matching distribution found for torch==9.9\n"},
        {"errorDetail": {"code": 1, "message": "The command '/bin/sh -c pip install torch' returned a non-zero "
                                                "code: 1"},
         "error": "The command '/bin/sh -c pip install torch' returned a non-zero code: 1"},
    ]
    for c in chunks:
        s.feed(c)
    s.finish()
    assert s.failed and s.error_code == 1
    summary = s.failure_summary()
    assert summary.startswith("Step 3/3 : RUN pip install torch: ")
    assert "non-zero code: 1" in summary
    assert "No matching distribution found" in s.tail_text()


def test_error_without_errordetail_and_errordetail_without_error():
    a = BuildStream()
    a.feed({"error": "failed to reach the registry"})
    assert a.failed and a.error == "failed to reach the registry"
    b = BuildStream()
    b.feed({"errorDetail": {"message": "no space left on device"}})
    assert b.failed and "no space left" in b.error
    assert b.failure_summary().startswith("before the first Dockerfile step")


def test_first_error_wins_and_later_image_id_does_not_clear_it():
    s = BuildStream()
    s.feed({"error": "first"})
    s.feed({"error": "second"})
    s.feed({"aux": {"ID": "sha256:abc"}})
    s.finish()
    assert s.failed and s.error == "first"


def test_stream_without_image_id_is_a_failure():
    s = BuildStream()
    s.feed({"stream": "Step 1/1 : FROM x\n"})
    s.finish()
    assert s.failed and "without an image ID" in s.error


def test_tail_keeps_last_40_lines_and_handles_split_lines():
    s = BuildStream()
    for i in range(100):
        s.feed({"stream": f"line {i}"})
        s.feed({"stream": "\n"})
    s.feed({"stream": "partial "})
    s.feed({"stream": "end\nnext"})
    s.flush()
    tail = list(s.tail)
    assert len(tail) == 40
    assert tail[-2:] == ["partial end", "next"]
    assert tail[-3] == "line 99"


def test_progress_bars_and_status_chunks():
    s = BuildStream()
    s.feed({"stream": "Downloading 10%\rDownloading 50%\rDownloading 100%\r\n"})
    s.feed({"status": "Downloading", "progressDetail": {"current": 1}, "progress": "[==>  ]", "id": "abc"})
    s.feed({"status": "Pull complete", "id": "abc"})
    assert list(s.tail) == ["Downloading 100%", "abc: Pull complete"]


def test_log_file_is_redacted():
    register_secret("s3cr3t-token-value")
    log = io.StringIO()
    s = BuildStream(log=log)
    s.feed({"stream": "pip install --index-url https://alice:hunter22@pypi.corp/simple torch\n"})
    s.feed({"stream": "token=s3cr3t-token-value\n"})
    s.feed({"error": "failed with https://bob:pw123456@proxy:3128"})
    text = log.getvalue()
    assert "hunter22" not in text and "s3cr3t-token-value" not in text and "pw123456" not in text
    assert "alice:***@" in text and "bob:***@" in text
    assert "hunter22" not in s.tail_text() and "pw123456" not in s.error


def test_non_dict_chunks_are_plain_output():
    s = BuildStream()
    s.feed(b"raw bytes line\n")
    s.feed(None)
    assert list(s.tail) == ["raw bytes line"]
