"""The BuildKit backend's command line, its process driver and its preflight, against a fake `docker` CLI (a script
that answers as docker 26.1 + buildx 0.13.1 did here and replays recorded rawjson streams)."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path

import pytest
from _fake_docker_cli import LS, install_fake_docker, loads

from imagebuild.builder.backend import BuildRequest
from imagebuild.builder.backends.buildkit.argv import (
    BASE_CONTEXT,
    EXPORT_OPTIONS,
    BuildxCall,
    buildx_argv,
    secret_env,
)
from imagebuild.builder.backends.buildkit.build import BuildxBackend
from imagebuild.builder.backends.buildkit.checks import (
    BuilderUnavailable,
    check_named_contexts,
    parse_ls,
    preflight,
)
from imagebuild.engine import held

FIXTURES = Path(__file__).parent / "fixtures" / "buildx"
PARENT = "sha256:" + "ab" * 32
BUILT = "sha256:" + "cd" * 32

@pytest.fixture()
def fake_docker(tmp_path, monkeypatch):
    return install_fake_docker(tmp_path, monkeypatch, built=BUILT)


def _request(**args: str) -> BuildRequest:
    """What the executor sends (builder/backend.py): the Dockerfile text, the parent apart, the credentials apart."""
    return BuildRequest(tag="reg/torch:2.13-runtime", dockerfile="ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n", timeout=30,
                        labels={"io.x": "1"}, build_args=dict(args), parents={"BASE_IMAGE": PARENT},
                        secret_build_args={"PIP_EXTRA_INDEX_URL": "https://u:pw@idx/simple"})


def test_argv_pins_the_parent_as_a_named_context_and_keeps_credentials_out():
    call = BuildxCall(context_dir=Path("/ctx"), dockerfile="Dockerfile", tag="t:1",
                      build_args={"BASE_IMAGE": PARENT, "PIP_EXTRA_INDEX_URL": "https://u:pw@idx", "A": "1"},
                      labels={"io.imagebuild.inputs-hash": "h"}, secrets=("PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL"),
                      base_ref=f"imagebuild-pin:{PARENT[7:]}")
    argv = buildx_argv(call)
    joined = " ".join(argv)
    assert "pw" not in joined
    assert argv[:2] == ["buildx", "build"] and argv[-1] == "/ctx"  # engine/cli.py adds the docker binary
    assert f"{BASE_CONTEXT}=docker-image://imagebuild-pin:{PARENT[7:]}" in argv
    assert f"BASE_IMAGE={BASE_CONTEXT}" in argv and "A=1" in argv
    assert "id=pip_extra_index_url,env=IMAGEBUILD_SECRET_PIP_EXTRA_INDEX_URL" in argv
    assert "id=pip_index_url,env=IMAGEBUILD_SECRET_PIP_INDEX_URL" not in argv  # the request has no such arg
    assert ["--network", "host"] == argv[argv.index("--network"):argv.index("--network") + 2]
    assert "--output" not in argv  # the docker driver stores the image in the engine itself
    assert secret_env(call.build_args, call.secrets) == {"IMAGEBUILD_SECRET_PIP_EXTRA_INDEX_URL": "https://u:pw@idx"}


def test_argv_for_another_driver_loads_the_image_with_rewritten_timestamps():
    call = BuildxCall(context_dir=Path("/ctx"), dockerfile="Dockerfile", tag="t:1", build_args={}, labels={},
                      builder="farm", docker_driver=False)
    argv = buildx_argv(call)
    assert argv[2:4] == ["--builder", "farm"]
    assert "type=docker," + EXPORT_OPTIONS in argv


def test_argv_for_the_containerd_store_exports_into_the_layout_with_rewritten_timestamps():
    call = BuildxCall(context_dir=Path("/ctx"), dockerfile="Dockerfile", tag="t:1", build_args={}, labels={},
                      layout=Path("/cache/held/oci"), metadata=Path("/tmp/b/metadata.json"))
    argv = buildx_argv(call)
    assert argv[argv.index("--output") + 1] == "type=oci,tar=false,dest=/cache/held/oci," + EXPORT_OPTIONS
    assert argv[argv.index("--metadata-file") + 1] == "/tmp/b/metadata.json"
    assert argv.count("--output") == 1 and argv[-1] == "/ctx"


def test_the_containerd_store_gets_the_export_loaded_and_a_failed_load_fails_the_build(fake_docker, monkeypatch):
    monkeypatch.setenv("FAKE_DRIVER_STATUS", '[["driver-type","io.containerd.snapshotter.v1"]]')
    backend = preflight(None)
    assert backend.via_layout
    build = backend.start(_request())
    events = list(build.events())
    assert build.outcome().image_id == BUILT
    [load] = loads(fake_docker)  # the whole image the first time (the layout held none of it), named by its tag
    assert load["layers"] == [True] and load["name"] == "docker.io/reg/torch:2.13-runtime"
    assert "loading into the engine" in [e.text for e in events if e.kind == "step"]
    monkeypatch.setenv("FAKE_NO_METADATA", "1")
    build = backend.start(_request())
    list(build.events())
    assert build.outcome().failed and "--metadata-file names no image manifest" in build.outcome().error
    monkeypatch.delenv("FAKE_NO_METADATA")
    monkeypatch.setenv("FAKE_LOAD_RC", "1")
    build = backend.start(_request())
    list(build.events())
    assert build.outcome().failed and "docker image load of the exported image failed" in build.outcome().error
    monkeypatch.delenv("FAKE_DRIVER_STATUS")
    assert not preflight(None).via_layout  # overlay2 (no containerd store): the engine's own image exporter


def test_a_rebuild_loads_only_the_blobs_new_to_the_layout_and_all_of_them_when_the_engine_lacks_one(fake_docker,
                                                                                                  monkeypatch):
    """The layout kept beside the engine (engine/held.py) holds what earlier exports wrote: those blobs are left out
    of the load (the engine loaded them then); an engine that lacks one (a fresh engine beside a kept layout) refuses
    that load, and the whole image is loaded, said in one line."""
    monkeypatch.setenv("FAKE_DRIVER_STATUS", '[["driver-type","io.containerd.snapshotter.v1"]]')
    backend = preflight(None)
    build = backend.start(_request())
    list(build.events())
    [first] = loads(fake_docker)
    assert build.outcome().image_id == BUILT and not held.find(BUILT)  # the engine holds another: nothing kept
    monkeypatch.setenv("FAKE_BUILT", first["digest"])  # the engine's ID is the loaded manifest's digest
    build = backend.start(_request())
    list(build.events())
    assert build.outcome().image_id == first["digest"] and held.find(first["digest"])  # kept for the push
    build = backend.start(_request())
    list(build.events())
    again = loads(fake_docker)[2]
    assert first["layers"] == [True] and again["layers"] == [False] and first["digest"] == again["digest"]
    monkeypatch.setenv("FAKE_ENGINE_LACKS", "1")
    build = backend.start(_request())
    events = list(build.events())
    assert build.outcome().image_id == first["digest"], build.outcome().error
    refused, whole = loads(fake_docker)[3:]
    assert refused["layers"] == [False] and whole["layers"] == [True]
    assert [e.text for e in events if e.kind == "line" and "the engine lacks a blob the kept layout holds" in e.text]


def test_build_runs_buildx_and_reads_the_engines_image_id(fake_docker):
    log = io.StringIO()
    req = _request()
    req = BuildRequest(**{**req.__dict__, "log": log})
    build = BuildxBackend().start(req)
    events = list(build.events())
    outcome = build.outcome()
    assert outcome.image_id == BUILT and not outcome.failed
    assert [e.text for e in events if e.kind == "image"] == [BUILT]
    seen = json.loads((fake_docker / "argv.json").read_text())
    assert f"{BASE_CONTEXT}=docker-image://imagebuild-pin:{PARENT[7:]}" in seen["argv"]
    assert (fake_docker / "tagged").read_text() == f"{PARENT} imagebuild-pin:{PARENT[7:]}"
    assert seen["secrets"] == {"IMAGEBUILD_SECRET_PIP_EXTRA_INDEX_URL": "https://u:pw@idx/simple"}
    assert not any("pw@" in a for a in seen["argv"])
    assert seen["dockerfile"].startswith("ARG BASE_IMAGE")  # the context tar was extracted for buildx
    assert "built ok" in log.getvalue()


def test_failed_build_reports_step_reason_and_tail(fake_docker, monkeypatch):
    monkeypatch.setenv("FAKE_STREAM", str(FIXTURES / "failed-run.rawjson"))
    monkeypatch.setenv("FAKE_RC", "1")
    build = BuildxBackend().start(_request())
    events = list(build.events())
    outcome = build.outcome()
    assert outcome.failed and outcome.image_id is None
    assert outcome.error.startswith("[pip 1/2] RUN echo collecting six") and "exit code: 3" in outcome.error
    assert "ERROR: no matching distribution" in outcome.tail
    assert sum(e.kind == "error" for e in events) == 1


def test_cancel_stops_the_process_and_fails_the_build(fake_docker, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "30")
    build = BuildxBackend().start(_request())
    threading.Timer(1.0, build.cancel).start()
    start = time.monotonic()
    events = list(build.events())
    assert time.monotonic() - start < 15
    assert build.outcome().error.endswith("interrupted")
    assert events[-1].kind == "error"


def test_parse_ls_and_the_named_context_rule():
    listed = parse_ls(LS + LS.splitlines()[0] + "\nnot json\n")
    assert [b.name for b in listed] == ["default", "farm", "k8s"]  # buildx 0.13.1 repeats the docker builder
    builders = {b.name: b for b in listed}
    assert builders["farm"].driver == "remote" and builders["farm"].buildkit == "v0.9.3"
    with pytest.raises(BuilderUnavailable, match=r"Docker Engine 20\.10\.24\+dfsg1 embeds .*--backend classic"):
        check_named_contexts(builders["default"], "20.10.24+dfsg1")
    check_named_contexts(builders["default"], "26.1.5+dfsg1")
    with pytest.raises(BuilderUnavailable, match=r"'farm' runs BuildKit v0\.9\.3"):
        check_named_contexts(builders["farm"], "26.1.5")
    check_named_contexts(builders["k8s"], "20.10.24")  # the engine does not build there


def test_preflight_lines(fake_docker, monkeypatch):
    backend = preflight(None)
    assert backend.docker_driver and backend.builder is None
    assert not preflight("k8s").docker_driver
    with pytest.raises(BuilderUnavailable, match=r"no buildx builder 'nope'; `docker buildx ls` shows: default "
                                                 r"\(docker, running\), farm \(remote, running\), k8s"):
        preflight("nope")
    monkeypatch.setenv("FAKE_DEAD", "k8s")
    with pytest.raises(BuilderUnavailable, match=r"'k8s' does not answer \(ERROR: failed to connect"):
        preflight("k8s")
    monkeypatch.setenv("FAKE_ENGINE", "20.10.24+dfsg1")
    with pytest.raises(BuilderUnavailable, match="lacks named contexts"):
        preflight(None)
    monkeypatch.setenv("FAKE_NO_BUILDX", "1")
    with pytest.raises(BuilderUnavailable, match="make install"):
        preflight(None)


def test_missing_docker_cli_is_one_line(monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_DOCKER_CLI", os.devnull + "/docker")
    with pytest.raises(BuilderUnavailable, match="make install"):
        preflight(None)


def test_registry_cache_flags_one_tag_per_image():
    flags = BuildxBackend(cache_repository="127.0.0.1:5000/ml/cache").cache_flags("reg.example/ml/torch:2.13-runtime")
    assert flags == ("--cache-from", "type=registry,ref=127.0.0.1:5000/ml/cache:2.13-runtime,registry.insecure=true",
                     "--cache-to", "type=registry,ref=127.0.0.1:5000/ml/cache:2.13-runtime,mode=max,ignore-error=true"
                     ",registry.insecure=true")
    assert "insecure" not in " ".join(BuildxBackend(cache_repository="reg.example/c").cache_flags("a/b:t"))
    assert BuildxBackend().cache_flags("a/b:t") == ()


def test_cache_export_needs_the_containerd_store():
    from imagebuild.builder.backends.buildkit.checks import Builder, check_cache_export

    docker = Builder("default", "docker", "running", "")
    with pytest.raises(BuilderUnavailable, match="containerd image store"):
        check_cache_export(docker, '[["Backing Filesystem","extfs"]]')
    check_cache_export(docker, '[["driver-type","io.containerd.snapshotter.v1"]]')
    check_cache_export(Builder("farm", "remote", "running", "v0.13.2"), "")


def test_auto_is_buildkit_where_the_engine_and_buildx_answer_else_classic_and_says_why(fake_docker, monkeypatch):
    from imagebuild.builder.backends import choose_auto

    assert choose_auto() == ("buildkit", "backend auto: dockerd 26.1.5+dfsg1 with buildx 0.13.1; building with "
                                         "BuildKit")
    monkeypatch.setenv("FAKE_NO_BUILDX", "1")
    name, line = choose_auto()
    assert name == "classic" and line.startswith("backend auto: dockerd 26.1.5+dfsg1 without the buildx plugin")
    assert line.endswith("; building with the classic builder")
    monkeypatch.delenv("FAKE_NO_BUILDX")
    monkeypatch.setenv("FAKE_ENGINE", "20.10.24+dfsg1")
    assert choose_auto() == ("classic", "backend auto: dockerd 20.10.24+dfsg1: its BuildKit lacks named contexts "
                                        "(Docker Engine >= 23.0); building with the classic builder")
    monkeypatch.setenv("IMAGEBUILD_DOCKER_CLI", os.devnull + "/docker")  # no docker CLI at all
    name, line = choose_auto()
    assert name == "classic" and line.startswith("backend auto: `docker version` names no engine (")
