"""The docker image store (engine/store.py, engine/build.py) over a stand-in of the SDK's low-level API: the one
place the unit tests look below the store protocol. Every other test fakes the store itself (_fake_engine.py).

What is checked here is the translation: the build request the classic builder gets, cancel shutting the streaming
response, error chunks inside HTTP-200 streams (pull, push, load) raising the engine's own text, "no such image"
answering None; an inspect answer kept until anything (a store write, a docker CLI call that may change images, a
build process still running) could have changed it."""

from __future__ import annotations

import io
import socket
import tarfile
from collections.abc import Iterator

import docker
import pytest
from _fake_engine import FakeEngine

from imagebuild.engine import cli
from imagebuild.engine import store as store_mod
from imagebuild.engine.build import shutdown_response
from imagebuild.engine.store import DockerImageStore, ImageStore, as_store
from imagebuild.engine.stream import EngineError, EngineStreamError, error_text, read_stream

FULL_ID = "sha256:" + "ab" * 32


class FakeResponse:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def sdk_stream_helper(response: FakeResponse, chunks: list) -> Iterator:
    """Like the SDK's `_stream_helper`: a generator whose frame holds the streaming `response`."""
    for chunk in chunks:
        if response.closed:
            raise ConnectionError("Connection broken: the socket was shut")
        yield chunk


class LowLevelAPI:
    """The few `docker.APIClient` calls these tests make, answering what each test scripts."""

    def __init__(self, chunks: list | None = None, error: Exception | None = None) -> None:
        self.chunks, self.error = chunks or [], error
        self.calls: list[tuple[str, dict]] = []
        self.responses: list[FakeResponse] = []

    def _answer(self, name: str, **kw):
        self.calls.append((name, kw))
        if self.error:
            raise self.error
        return iter(list(self.chunks))

    def build(self, **kw):
        kw["context_names"] = tarfile.open(fileobj=kw["fileobj"]).getnames()
        self.calls.append(("build", kw))
        if self.error:
            raise self.error
        response = FakeResponse()
        self.responses.append(response)
        return sdk_stream_helper(response, list(self.chunks))

    def pull(self, repository, **kw):
        return self._answer("pull", repository=repository, **kw)

    def push(self, repository, tag, **kw):
        return self._answer("push", repository=repository, tag=tag, **kw)

    def load_image(self, data, quiet=None):
        return self._answer("load", data=data.read())

    def inspect_image(self, ref):
        self.calls.append(("inspect", {"ref": ref}))
        if self.error:
            raise self.error
        return {"Id": FULL_ID, "RepoTags": [ref]}

    def tag(self, image, repository, tag, force=False):
        self.calls.append(("tag", {"image": image, "repository": repository, "tag": tag}))
        return True


class Client:
    def __init__(self, api: LowLevelAPI) -> None:
        self.api = api


def store(chunks: list | None = None, error: Exception | None = None) -> tuple[DockerImageStore, LowLevelAPI]:
    api = LowLevelAPI(chunks, error)
    return DockerImageStore(Client(api)), api  # type: ignore[arg-type]


def context_tar() -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = 13
        tar.addfile(info, io.BytesIO(b"FROM scratch\n"))
    out.seek(0)
    return out


def start_build(s: DockerImageStore):
    return s.build(context_tar(), tag="ib/x:1", dockerfile="Dockerfile", build_args={"A": "1"}, labels={"l": "v"},
                   timeout=60)


def test_build_is_the_classic_builders_request_on_the_host_network():
    s, api = store([{"stream": "Step 1/1 : FROM scratch\n"}, {"aux": {"ID": FULL_ID}}])
    call = start_build(s)
    assert api.calls == []  # nothing sent before the chunks are read
    assert list(call.chunks()) == [{"stream": "Step 1/1 : FROM scratch\n"}, {"aux": {"ID": FULL_ID}}]
    [(_, kw)] = api.calls
    assert kw["context_names"] == ["Dockerfile"] and kw["custom_context"] and kw["decode"]
    assert kw["rm"] and kw["forcerm"] and kw["pull"] is False and kw["network_mode"] == "host"
    assert kw["buildargs"] == {"A": "1"} and kw["labels"] == {"l": "v"} and kw["tag"] == "ib/x:1"
    assert kw["timeout"] == 60 and kw["dockerfile"] == "Dockerfile"


def test_build_cancel_shuts_the_response_mid_stream():
    s, api = store([{"stream": "Step 1/2 : FROM scratch\n"}, {"stream": "Step 2/2 : RUN sleep 100\n"}])
    call = start_build(s)
    chunks = call.chunks()
    next(chunks)
    call.cancel()
    assert api.responses[0].closed
    with pytest.raises(ConnectionError):
        next(chunks)


def test_build_cancelled_before_it_starts_sends_nothing():
    s, api = store([])
    call = start_build(s)
    call.cancel()
    with pytest.raises(InterruptedError):
        list(call.chunks())
    assert api.calls == []


def test_build_refused_by_the_engine_is_an_engine_error_with_its_explanation():
    s, _ = store(error=docker.errors.APIError("500 Server Error", explanation="dockerfile parse error line 3"))
    with pytest.raises(EngineError, match="^dockerfile parse error line 3$"):
        list(start_build(s).chunks())


def test_shutdown_response_shuts_the_socket_and_closes():
    a, b = socket.socketpair()
    try:
        class Raw:
            pass

        raw = Raw()
        raw._fp = Raw()
        raw._fp.fp = Raw()
        raw._fp.fp.raw = Raw()
        raw._fp.fp.raw._sock = a
        resp = FakeResponse()
        resp.raw = raw
        shutdown_response(resp)
        assert resp.closed and b.recv(1) == b""  # the peer (the engine) sees EOF
        shutdown_response(None)
    finally:
        a.close()
        b.close()


def test_pull_error_chunk_under_http_200_raises_the_engine_text():
    s, api = store([{"status": "Pulling from library/ubuntu"},
                    {"errorDetail": {"message": "manifest unknown"}, "error": "manifest unknown"}])
    seen: list[dict] = []
    with pytest.raises(EngineStreamError, match="^manifest unknown$"):
        s.pull("ubuntu", "sha256:" + "b" * 64, on_chunk=seen.append)
    assert seen == [{"status": "Pulling from library/ubuntu"}]
    assert api.calls[0][1] == {"repository": "ubuntu", "tag": "sha256:" + "b" * 64, "stream": True, "decode": True}


def test_pull_with_credentials_passes_them_to_the_engine():
    s, api = store([{"status": "Digest: sha256:abc"}])
    s.pull("reg:5000/ml/x", "sha256:" + "c" * 64, auth_config={"username": "u", "password": "p"})
    assert api.calls[0][1]["auth_config"] == {"username": "u", "password": "p"}


@pytest.mark.parametrize("chunk", [{"errorDetail": {"message": "no space left on device"},
                                    "error": "no space left on device"},
                                   {"message": "no space left on device"}])
def test_load_error_inside_the_stream_raises_and_lines_come_back(tmp_path, chunk):
    archive = tmp_path / "a.tar"
    archive.write_bytes(b"x")
    s, _ = store([{"stream": "Loading layer"}, chunk])
    with pytest.raises(EngineStreamError, match="no space left on device"):
        s.load(archive)
    ok, api = store([{"stream": "Loaded image: imagebuild-os/debian12:abc\n"}])
    assert ok.load(archive) == ["Loaded image: imagebuild-os/debian12:abc"]
    assert api.calls[0][1]["data"] == b"x"


def test_missing_image_is_none_other_errors_raise():
    s, _ = store(error=docker.errors.ImageNotFound("No such image: x:1"))
    assert s.inspect("x:1") is None and s.image_id("x:1") is None
    s, _ = store(error=docker.errors.APIError("500", explanation="engine broke"))
    with pytest.raises(EngineError, match="engine broke"):
        s.inspect("x:1")
    assert store()[0].image_id("x:1") == FULL_ID


def test_as_store_keeps_a_store_and_wraps_a_client():
    fake = FakeEngine()
    assert as_store(fake) is fake and isinstance(fake, ImageStore)
    wrapped = as_store(Client(LowLevelAPI()))  # type: ignore[arg-type]
    assert isinstance(wrapped, DockerImageStore) and isinstance(wrapped, ImageStore)


def test_error_text_and_read_stream_read_every_chunk():
    assert error_text({"errorDetail": {"message": "denied: token=abc"}}) == "denied: token=abc"
    assert error_text({"error": "x", "errorDetail": {"message": "y"}}) == "x"
    assert error_text({"status": "Pushed", "id": "a"}) is None and error_text("text") is None
    seen: list[dict] = []
    with pytest.raises(EngineStreamError) as err:
        read_stream([{"error": "one"}, {"status": "s"}, {"error": "two"}, {"error": "one"}], seen.append)
    assert err.value.messages == ["one", "two"] and str(err.value) == "one; two" and seen == [{"status": "s"}]


def _inspects(api: LowLevelAPI) -> list[str]:
    return [kw["ref"] for name, kw in api.calls if name == "inspect"]


def test_an_inspect_answer_is_kept_until_this_process_changes_the_engine():
    s, api = store()
    assert s.inspect("x:1") == {"Id": FULL_ID, "RepoTags": ["x:1"]} and s.image_id("x:1") == FULL_ID
    assert DockerImageStore(s.client).inspect("x:1")["Id"] == FULL_ID  # another store on the same connection
    assert _inspects(api) == ["x:1"]
    s.inspect("y:1")
    assert _inspects(api) == ["x:1", "y:1"]
    s.tag(FULL_ID, "x", "2")  # a write: every answer read before it is asked again
    s.inspect("x:1")
    s.inspect("x:1")
    assert _inspects(api) == ["x:1", "y:1", "x:1"]
    other, other_api = store()
    other.inspect("x:1")
    assert _inspects(other_api) == ["x:1"]  # another connection: answers of its own


def test_a_kept_answer_is_a_copy_and_not_found_is_kept_but_errors_are_not():
    s, _ = store()
    s.inspect("x:1")["RepoTags"].append("changed:by-a-caller")
    assert s.inspect("x:1")["RepoTags"] == ["x:1"]
    gone, gone_api = store(error=docker.errors.ImageNotFound("No such image: x:1"))
    assert gone.inspect("x:1") is None and gone.image_id("x:1") is None and _inspects(gone_api) == ["x:1"]
    broken, broken_api = store(error=docker.errors.APIError("500", explanation="engine broke"))
    for _ in range(2):
        with pytest.raises(EngineError):
            broken.inspect("x:1")
    assert _inspects(broken_api) == ["x:1", "x:1"]


def test_an_answer_older_than_the_limit_is_asked_again(monkeypatch):
    s, api = store()
    monkeypatch.setattr(store_mod, "ANSWER_SECONDS", -1.0)  # every kept answer too old
    s.inspect("x:1")
    s.inspect("x:1")
    assert _inspects(api) == ["x:1", "x:1"]


def test_docker_cli_calls_that_may_change_images_void_the_kept_answers(monkeypatch, tmp_path):
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\n[ \"$1\" = buildx ] && [ \"$2\" = build ] && sleep 0.3\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("IMAGEBUILD_DOCKER_CLI", str(fake))
    s, api = store()
    s.inspect("x:1")
    assert cli.run(["version"]).ok and cli.run(["image", "inspect", "x:1"]).ok  # questions only
    s.inspect("x:1")
    assert _inspects(api) == ["x:1"]
    assert cli.run(["image", "tag", FULL_ID, "x:2"]).ok  # a change
    s.inspect("x:1")
    assert _inspects(api) == ["x:1", "x:1"]
    process = cli.start(["buildx", "build", "."])  # runs on: nothing kept while it does
    s.inspect("x:1")
    s.inspect("x:1")
    assert process.wait(timeout=10) == 0
    assert _inspects(api) == ["x:1"] * 4
    s.inspect("x:1")
    s.inspect("x:1")
    assert _inspects(api) == ["x:1"] * 5
    assert cli.reads_only(["buildx", "inspect"]) and not cli.reads_only(["buildx", "inspect", "--bootstrap", "b"])
    assert not cli.reads_only(["image", "load", "--input", "a.tar"])
