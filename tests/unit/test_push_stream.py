"""Push stream parsing and error classification."""

from __future__ import annotations

import pytest

from imagebuild.push import classify, parse_push_stream

D = "sha256:" + "ab" * 32


def test_digest_from_aux_and_counts():
    chunks = [
        {"status": "The push refers to repository [127.0.0.1:5000/x]"},
        {"status": "Preparing", "progressDetail": {}, "id": "l1"},
        {"status": "Preparing", "progressDetail": {}, "id": "l2"},
        {"status": "Preparing", "progressDetail": {}, "id": "l3"},
        {"status": "Layer already exists", "progressDetail": {}, "id": "l2"},
        {"status": "Mounted from other/repo", "progressDetail": {}, "id": "l3"},
        {"status": "Pushing", "progressDetail": {"current": 10, "total": 5000}, "id": "l1"},
        {"status": "Retrying in 5 seconds", "progressDetail": {}, "id": "l1"},
        {"status": "Retrying in 4 seconds", "progressDetail": {}, "id": "l1"},
        {"status": "Pushing", "progressDetail": {"current": 5000, "total": 5000}, "id": "l1"},
        {"status": "Pushed", "progressDetail": {}, "id": "l1"},
        {"status": f"1: digest: {D} size: 739"},
        {"progressDetail": {}, "aux": {"Tag": "1", "Digest": D, "Size": 739}},
    ]
    seen = []
    r = parse_push_stream(chunks, on_chunk=seen.append)
    assert r.digest == D and r.size == 739 and r.errors == []
    assert (r.layers_pushed, r.layers_existing, r.bytes_pushed, r.retries_by_engine) == (1, 2, 5000, 1)
    assert len(seen) == len(chunks)


def test_digest_from_status_line_when_no_aux():
    r = parse_push_stream([{"status": f"v1: digest: {D} size: 12"}])
    assert r.digest == D and r.size == 12


def test_every_error_counts_even_after_a_digest():
    r = parse_push_stream([
        {"status": f"v1: digest: {D} size: 12"},
        {"errorDetail": {"message": "first"}},
        {"error": "second", "errorDetail": {"message": "second"}},
    ])
    assert r.errors == ["first", "second"]


def test_error_text_is_redacted():
    from imagebuild.secrets import register_secret

    register_secret("hunter2-secret")
    r = parse_push_stream([{"error": "auth hunter2-secret failed for https://u:pw@reg/x"}])
    assert "hunter2-secret" not in r.errors[0] and ":pw@" not in r.errors[0]


@pytest.mark.parametrize("message,kind", [
    ("unauthorized: authentication required", "auth"),
    ("denied: requested access to the resource is denied", "auth"),
    ("received unexpected HTTP status: 401 Unauthorized", "auth"),
    ("received unexpected HTTP status: 403 Forbidden", "auth"),
    ("received unexpected HTTP status: 503 Service Unavailable", "transient"),
    ("received unexpected HTTP status: 500 Internal Server Error", "transient"),
    ("toomanyrequests: Rate exceeded", "transient"),
    ("Patch http://r/v2/x/blobs/uploads/u: read: connection reset by peer", "transient"),
    ("net/http: TLS handshake timeout", "transient"),
    ("Put http://r/v2/x/blobs/uploads/u: EOF", "transient"),
    ("unexpected EOF", "transient"),
    ("blob upload unknown: blob upload unknown to registry", "transient"),
    ("dial tcp 127.0.0.1:5000: connect: connection refused", "transient"),
    ("manifest invalid: manifest invalid", "fatal"),
    ("tag does not exist: x:y", "fatal"),
    ("name unknown: repository name not known to registry", "fatal"),
])
def test_classify(message, kind):
    assert classify(message) == kind
