"""The builder seam: the classic backend against the fake engine (stream errors fail the image, cancel breaks the
call, leftovers are removed) and the executor against a scripted backend (it talks to builds only through the
protocol). The docker store's own build request and cancel are test_engine_store.py's."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator

import pytest
from _fake_engine import FakeEngine

from imagebuild.builder import interrupt
from imagebuild.builder.backend import BuildBackend, BuildEvent, BuildOutcome, BuildRequest, RunningBuild
from imagebuild.builder.backends import make_backend
from imagebuild.builder.backends.classic.build import ClassicBackend, ClassicBuild
from imagebuild.builder.executor import build_plan
from imagebuild.builder.options import BuildOptions
from imagebuild.builder.progress import Progress
from imagebuild.builder.state import RunState
from imagebuild.builder.uptodate import INPUTS_LABEL
from imagebuild.engine.stream import EngineError
from imagebuild.errors import UsageError
from imagebuild.models import BaseSource, ImagePlan, OSInfo, Plan, ResolvedVariant, Versions

FULL_ID = "sha256:" + "ab" * 32
OS_REF = "example/os:1@sha256:" + "0" * 64
OS_ID = "sha256:" + "05" * 32


def request(log: io.StringIO | None = None) -> BuildRequest:
    return BuildRequest(tag="ib/x:1", dockerfile="FROM scratch\n", build_args={"A": "1"}, labels={"l": "v"},
                        timeout=60, parents={"BASE_IMAGE": "sha256:p"}, secret_build_args={"S": "s3cr3t"},
                        context_files={"f.txt": b"x"}, log=log)


def steps(*lines: str) -> list[dict]:
    return [{"stream": line + "\n"} for line in lines]


def engine(chunks: list | None = None, error: Exception | None = None) -> FakeEngine:
    fake = FakeEngine()
    fake.add_image(None, {}, image_id=FULL_ID)
    if chunks is not None:
        fake.build_streams.append(chunks)
    fake.build_error = error
    return fake


def run_build(store: FakeEngine, req: BuildRequest | None = None) -> tuple[ClassicBuild, list[BuildEvent]]:
    build = ClassicBackend(store).start(req or request())
    return build, list(build.events())


# -- classic backend ------------------------------------------------------------------------------------------------
def test_classic_request_is_one_store_build():
    store = engine(steps("Step 1/1 : FROM scratch") + [{"aux": {"ID": FULL_ID}}])
    build, events = run_build(store)
    [call] = store.builds
    assert call["context"] == ["Dockerfile", "f.txt"] and call["dockerfile"] == "FROM scratch\n"
    assert call["buildargs"] == {"A": "1", "BASE_IMAGE": "sha256:p", "S": "s3cr3t"} and call["labels"] == {"l": "v"}
    assert list(call["buildargs"]) == ["A", "BASE_IMAGE", "S"]  # parents over build args, secrets over both
    assert call["tag"] == "ib/x:1" and call["timeout"] == 60 and call["network"] == "host"
    assert [e.kind for e in events] == ["step", "image"] and events[0].step == 1 and events[0].text == "FROM scratch"
    assert build.outcome() == BuildOutcome(image_id=FULL_ID)


def test_short_image_id_is_resolved_to_the_full_id():
    build, _ = run_build(engine(steps("Step 1/1 : FROM scratch", "Successfully built " + FULL_ID[7:19])))
    assert build.outcome().image_id == FULL_ID


@pytest.mark.parametrize("error_chunk", [
    {"errorDetail": {"code": 1, "message": "returned a non-zero code: 1"}, "error": "returned a non-zero code: 1"},
    {"errorDetail": {"message": "returned a non-zero code: 1"}},
    {"error": "returned a non-zero code: 1"},
], ids=["both", "errorDetail-only", "error-only"])
def test_error_chunk_in_http_200_stream_fails_the_image(error_chunk):
    log = io.StringIO()
    # the engine goes on after the error chunk: neither an image ID nor "Successfully built" may undo the failure
    chunks = (steps("Step 1/2 : FROM scratch", "Step 2/2 : RUN false", "output of false") + [error_chunk]
              + [{"aux": {"ID": FULL_ID}}] + steps("Successfully built 0123456789ab"))
    build, events = run_build(engine(chunks), request(log))
    assert [e.kind for e in events].count("error") == 1
    out = build.outcome()
    assert out.failed and out.image_id is None
    assert out.error == "Step 2/2 : RUN false: returned a non-zero code: 1"
    assert "output of false" in out.tail and "ERROR: returned a non-zero code: 1" in log.getvalue()


def test_stream_without_image_id_fails():
    build, events = run_build(engine(steps("Step 1/1 : FROM scratch")))
    assert events[-1].kind == "error" and "without an image ID" in events[-1].text
    assert build.outcome().failed


def test_engine_error_fails_with_its_explanation():
    build, events = run_build(engine([], EngineError("dockerfile parse error line 3", 500)))
    assert events == [BuildEvent("error", "dockerfile parse error line 3")]
    assert build.outcome().error == "before the first Dockerfile step: dockerfile parse error line 3"


def test_lost_connection_fails_as_lost_not_interrupted():
    build, events = run_build(engine([], ConnectionError("reset by peer")))
    assert "lost the build stream: ConnectionError: reset by peer" in build.outcome().error


def test_missing_context_folder_fails_the_image_before_sending_anything(tmp_path):
    store = engine([])
    req = BuildRequest(tag="ib/x:1", dockerfile="FROM scratch\n", build_args={}, labels={}, timeout=60,
                       context_dirs={"wheels": tmp_path / "gone"})
    build, events = run_build(store, req)
    assert store.builds == [] and [e.kind for e in events] == ["error"]
    assert "FileNotFoundError" in build.outcome().error and "does not exist" in build.outcome().error


def test_cancel_during_the_stream_breaks_the_call_and_fails_as_interrupted():
    store = engine(steps("Step 1/3 : FROM scratch", "Step 2/3 : RUN sleep 100", "Step 3/3 : RUN true")
                   + [{"aux": {"ID": FULL_ID}}])
    build = ClassicBackend(store).start(request())
    seen = []
    for ev in build.events():
        seen.append(ev)
        if ev.kind == "step" and ev.step == 2:
            build.cancel()  # the interrupt path does this from another thread
    assert store.build_calls[0].cancelled
    assert [e.kind for e in seen] == ["step", "step", "error"] and seen[-1].text == "interrupted"
    assert build.outcome().failed and build.outcome().error.endswith(": interrupted")


def test_cancel_before_the_build_starts_sends_nothing():
    store = engine(steps("Step 1/1 : FROM scratch") + [{"aux": {"ID": FULL_ID}}])
    build = ClassicBackend(store).start(request())
    build.cancel()
    assert [e.kind for e in build.events()] == ["error"]
    assert store.builds == [] and build.outcome().error.endswith("interrupted")


def test_cleanup_removes_announced_containers_and_warns_about_failures():
    store = engine(steps("Step 1/1 : RUN x", " ---> Running in aaa111bbb222", " ---> Running in ccc333ddd444",
                         " ---> Running in eee555fff666"))
    store.remove_errors = {"ccc333ddd444": None, "eee555fff666": RuntimeError("busy")}
    backend = ClassicBackend(store)
    list(backend.start(request()).events())
    warnings: list[str] = []
    assert backend.cleanup(warnings.append) == ["aaa111bbb222"]
    assert warnings == ["could not remove build container eee555fff666: busy"]


def test_classic_backend_satisfies_the_protocol():
    backend: BuildBackend = ClassicBackend(FakeEngine())
    build: RunningBuild = backend.start(request())
    assert callable(build.cancel) and callable(build.outcome)


def test_the_backend_is_chosen_by_name_per_run(tmp_path):
    assert isinstance(make_backend("classic", FakeEngine()), ClassicBackend)
    with pytest.raises(UsageError, match="unknown build backend 'nope'; choices: classic"):
        RunState(FakeEngine(), Plan("t", []), BuildOptions(backend="nope"), Progress())


# -- the executor through the protocol ------------------------------------------------------------------------------
class ScriptedBuild:
    def __init__(self, request: BuildRequest, events: list[BuildEvent], outcome: BuildOutcome) -> None:
        self.request, self._events, self._outcome = request, events, outcome
        self.cancelled = threading.Event()
        self.dockerfile = ""

    def events(self) -> Iterator[BuildEvent]:
        self.dockerfile = self.request.dockerfile
        assert self.request.log is not None
        self.request.log.write("scripted output\n")
        yield from self._events

    def cancel(self) -> None:
        self.cancelled.set()

    def outcome(self) -> BuildOutcome:
        return self._outcome


class ScriptedBackend:
    """Builds nothing: each tag gets the events and outcome the test scripted."""

    def __init__(self, script: dict[str, tuple[list[BuildEvent], BuildOutcome]]) -> None:
        self.script = script
        self.builds: list[ScriptedBuild] = []
        self.cleanups = 0

    def start(self, request: BuildRequest) -> ScriptedBuild:
        events, outcome = self.script[request.tag]
        build = ScriptedBuild(request, events, outcome)
        self.builds.append(build)
        return build

    def cleanup(self, warn: Callable[[str], None]) -> list[str]:
        self.cleanups += 1
        return []


def image_store() -> FakeEngine:
    """The engine side the executor uses besides the backend: image look-ups (bases, up to date, size, aliases)."""
    store = FakeEngine()
    store.add_image(OS_REF, {}, size=10, image_id=OS_ID)
    return store


def plan_image(flavor: str, parent: ImagePlan | None) -> ImagePlan:
    osinfo = OSInfo(id="debian12", family="debian", version="12", codename="bookworm", system_python="3.11",
                    installable_pythons=("3.11",), mirror="http://deb.debian.org/debian", glibc="2.36")
    var = ResolvedVariant(key="k", name="ib", registry="", versions=Versions(torch="2.13.0", cuda="cpu",
                                                                             python="3.11", os="debian12"),
                          cuda_tag="cpu", os=osinfo, base=BaseSource(kind="registry", ref=OS_REF),
                          torch_index_url=None, flavors=("base", "runtime"), tf32=True, gpu_archs=(), arch_list=(),
                          min_driver=None)
    return ImagePlan(id=f"k-{flavor}", tag=f"ib:k-{flavor}", flavor=flavor, parent=parent.tag if parent else None,
                     variant=var, dockerfile=f"ARG BASE_IMAGE\nFROM ${{BASE_IMAGE}}\nRUN echo {flavor}\n",
                     build_args={"PY": "3.11"}, context_files={}, labels={"io.imagebuild.flavor": flavor},
                     inputs_hash=f"sha256:{flavor}", secret_build_args={"PIP_INDEX_URL": "https://u:s3cr3t@idx/"})


def options(tmp_path) -> BuildOptions:
    return BuildOptions(log_dir=tmp_path, check_disk=False, proxies={"HTTP_PROXY": "http://proxy:3128"},
                        created="2026-01-01T00:00:00Z", revision="abc", jobs=1)


def test_executor_builds_through_the_backend_protocol(tmp_path):
    base = plan_image("base", None)
    runtime = plan_image("runtime", base)
    base_id = "sha256:" + "b1" * 32
    backend = ScriptedBackend({
        base.tag: ([BuildEvent("step", "FROM ${BASE_IMAGE}", 1, 2), BuildEvent("line", "hello")],
                   BuildOutcome(image_id=base_id)),
        runtime.tag: ([BuildEvent("step", "RUN false", 2, 2), BuildEvent("error", "boom")],
                      BuildOutcome(image_id=None, error="Step 2/2 : RUN false: boom", tail="last line")),
    })
    results = build_plan(image_store(), Plan("t", [base, runtime]), options(tmp_path), Progress(), backend=backend)
    assert [(r.status, r.image_id) for r in results] == [("built", base_id), ("failed", None)]
    assert [r.backend for r in results] == ["classic", None]  # the report's backend column: what built it
    assert results[1].error == "Step 2/2 : RUN false: boom"
    first, second = backend.builds
    # SOURCE_DATE_EPOCH: the OS image's date (this fake engine has none: 0)
    assert first.request.build_args == {"HTTP_PROXY": "http://proxy:3128", "PY": "3.11", "SOURCE_DATE_EPOCH": "0",
                                        "CREATED": "2026-01-01T00:00:00Z", "REVISION": "abc"}
    assert list(first.request.build_args) == ["HTTP_PROXY", "PY", "SOURCE_DATE_EPOCH", "CREATED", "REVISION"]
    assert first.request.parents == {"BASE_IMAGE": OS_ID}
    assert first.request.secret_build_args == {"PIP_INDEX_URL": "https://u:s3cr3t@idx/"}
    assert second.request.parents["BASE_IMAGE"] == base_id
    assert second.request.labels == {"io.imagebuild.flavor": "runtime", INPUTS_LABEL: "sha256:runtime",
                                     "io.imagebuild.base-id": "", "io.imagebuild.source-date-epoch": "0"}
    assert first.dockerfile == base.dockerfile and first.request.timeout == BuildOptions().build_timeout
    log = (tmp_path / "k-base.log").read_text()
    assert log.startswith(f"# {base.tag}\n# inputs hash sha256:base\n# BASE_IMAGE={OS_ID}\n")
    assert "scripted output" in log


def test_interrupt_cancels_running_builds_and_cleans_up(tmp_path):
    base = plan_image("base", None)
    backend = ScriptedBackend({})
    run = RunState(image_store(), Plan("t", [base]), options(tmp_path), Progress(), backend=backend)
    build = ScriptedBuild(request(), [], BuildOutcome(image_id=None, error="x"))
    run.builds[base.tag] = build
    interrupt.interrupt(run)
    assert run.cancel.is_set() and build.cancelled.is_set() and backend.cleanups == 1


def test_default_backend_is_classic(tmp_path):
    run = RunState(image_store(), Plan("t", [plan_image("base", None)]), options(tmp_path), Progress())
    assert isinstance(run.backend, ClassicBackend)


def test_classic_build_removes_the_step_images_whose_history_carries_index_credentials():
    """The classic builder keeps a builder stage's step images (its cache) with every build argument in their
    history: with a credentialed index those are removed after the build, leaf first; the final image and step
    images without the credential stay."""
    secret = "https://ci:hunter2@pypi.corp/simple"
    engine = FakeEngine()
    clean = engine.add_image(None, {}, image_id="sha256:" + "a" * 64)
    dirty1 = engine.add_image(None, {}, image_id="sha256:" + "b" * 64)
    dirty2 = engine.add_image(None, {}, image_id="sha256:" + "c" * 64)
    final = engine.add_image(None, {}, image_id="sha256:" + "d" * 64)
    engine.histories = {dirty1: [{"CreatedBy": f"|1 PIP_EXTRA_INDEX_URL={secret} /bin/sh -c mkdir"}],
                        dirty2: [{"CreatedBy": f"|1 PIP_EXTRA_INDEX_URL={secret} /bin/sh -c pip install"}],
                        clean: [{"CreatedBy": "/bin/sh -c #(nop) SHELL"}],
                        final: [{"CreatedBy": "/bin/sh -c #(nop) LABEL x=1"}]}
    engine.build_streams = [[{"stream": f"Step {k}/4 : X\n"} if k % 2 else {"stream": f" ---> {iid[7:19]}\n"}
                             for k, iid in ((1, ""), (2, clean), (3, ""), (4, dirty1), (5, ""), (6, dirty2),
                                            (7, ""), (8, final))]
                            + [{"aux": {"ID": final}}, {"stream": f"Successfully built {final[7:19]}\n"}]]
    request = BuildRequest(tag="t:1", dockerfile="FROM x\n", build_args={}, labels={}, timeout=30,
                           secret_build_args={"PIP_EXTRA_INDEX_URL": secret})
    build = ClassicBackend(engine).start(request)
    lines = [ev.text for ev in build.events() if ev.kind == "line"]
    assert build.outcome().image_id == final
    assert engine.removed_images == [dirty2, dirty1]  # leaf first; the clean step and the final image stay
    assert any("removed 2 intermediate image(s)" in ln for ln in lines)
    assert all("hunter2" not in ln for ln in lines)


def test_classic_build_without_credentials_removes_nothing():
    engine = FakeEngine()
    build = ClassicBackend(engine).start(BuildRequest(tag="t:1", dockerfile="FROM x\nRUN true\n", build_args={},
                                                      labels={}, timeout=30))
    list(build.events())
    assert build.outcome().image_id and engine.removed_images == []
