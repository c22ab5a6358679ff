"""The runtime's env stage as an image of its own on BuildKit (builder/backends/buildkit/envimage.py): its key, and the
backend's three buildx processes against the one fake docker CLI. Proven for real (the same image ID as one build,
the env image taken again on a one-package rebuild) in tests/integration/test_buildkit_backend.py and
test_env_layers.py."""

from __future__ import annotations

import json
import os
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
from _fake_docker_cli import FIXTURES, install_fake_docker, loads
from _render_cases import CPU

from imagebuild.builder.backend import BuildRequest
from imagebuild.builder.backends.buildkit import envimage
from imagebuild.builder.backends.buildkit.checks import preflight
from imagebuild.render.tiers import ENV_ARG

# A real BuildKit export (dockerd 26.1.5, buildx 0.13.1): an image FROM an env image passed by its plain tag, whose
# two layers (ENV_LAYERS) the export did not re-date; ONE_BUILD is the manifest digest the same Dockerfile gave with
# the env stage in line (and with the env image as a named context): every layer annotated as re-dated.
CHILD = FIXTURES / "env-image-child.tar"
ENV_LAYERS = ["sha256:804d61715ff0ead1e74d2b3c33f3b775234ac6f47c9ae22eb7daeeda5c968d19",
              "sha256:830d4da8ec34cefb40fa1d7a5dd78ef5c4765ec8c3dba6caff2ef481cf0c1394"]
ONE_BUILD = "sha256:f68d0f3e07b1933f1edf179e75d1fc6b9246371dd1bc6d22f6793c89515f0923"
AS_EXPORTED = "sha256:d8123040c2990f076ccb79cee12082c18be705cdf021745d896bd51c2d0235d5"
PARENT = "sha256:" + "ab" * 32
BUILT = "sha256:" + "cd" * 32
SECRET = "https://u:Pa55w0rd@idx/simple"

DOCKERFILE = """\
ARG BASE_IMAGE
ARG ENV_IMAGE=env

FROM ${BASE_IMAGE} AS resolve
ARG PIP_EXTRA_INDEX_URL
COPY files/imagebuild-tiers.json /tmp/
RUN resolve

# layer 1 of the environment: torch
FROM ${BASE_IMAGE} AS tier-torch
ARG PIP_EXTRA_INDEX_URL
ARG SOURCE_DATE_EPOCH=0
COPY wheelhouse/ /tmp/wheelhouse/
COPY --from=resolve /opt/tiers/torch.txt /opt/stage/torch.txt
RUN pip install torch

# layer 2 of the environment: the matrix's package numpy
FROM ${BASE_IMAGE} AS tier-matrix-numpy
ARG PIP_EXTRA_INDEX_URL
COPY --from=resolve /opt/tiers/matrix-numpy.txt /opt/stage/matrix-numpy.txt
RUN pip install numpy

FROM ${BASE_IMAGE} AS env
ARG SOURCE_DATE_EPOCH
RUN apt-get install gcc
COPY --link --from=tier-torch /opt/stage/ /

FROM scratch AS env-key
COPY --from=resolve /opt/tiers/torch.txt /

FROM ${ENV_IMAGE}
COPY --link --from=tier-matrix-numpy /opt/stage/ /
COPY files/entrypoint /usr/local/bin/
ARG CREATED=""
LABEL created="${CREATED}"
"""


def _key(dockerfile: str = DOCKERFILE, key_text: bytes = b"torch==2.13.0\n", args: dict | None = None,
          files: dict | None = None, wheelhouse: Path | None = None, **kw) -> str:
    base = {"SOURCE_DATE_EPOCH": "0", "CREATED": "0", "PIP_EXTRA_INDEX_URL": SECRET}
    return envimage.env_key(dockerfile, {"torch.txt": key_text}, {**base, **(args or {})}, ("PIP_EXTRA_INDEX_URL",),
                            parent_id=kw.get("parent", PARENT), platform=kw.get("platform", "linux/amd64"),
                            context_files=files or {"files/entrypoint": b"#!/bin/sh\n"},
                            context_dirs={"wheelhouse": wheelhouse} if wheelhouse else {})


def test_the_dockerfile_splits_and_its_env_closure_leaves_the_matrix_and_the_resolve_out():
    assert envimage.splits(DOCKERFILE)
    assert [s.name for s in envimage.env_closure(DOCKERFILE)] == ["tier-torch", "env"]
    assert not envimage.splits("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")  # base, dev: one build
    assert not envimage.splits(DOCKERFILE.replace("FROM ${ENV_IMAGE}", "FROM ${BASE_IMAGE}"))
    assert not envimage.splits(DOCKERFILE.replace("AS env-key", "AS other"))


def test_the_key_follows_what_the_env_stage_is_made_of_and_nothing_else(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch.whl").write_bytes(b"one")
    key = _key(wheelhouse=wheels)
    assert key == _key(wheelhouse=wheels)
    # what does not reach the env stage: the matrix's tiers, comments, the final stage, undeclared args, a secret
    added = DOCKERFILE.replace("FROM ${ENV_IMAGE}\n", "FROM ${BASE_IMAGE} AS tier-matrix-six\nRUN pip install six\n\n"
                                                      "# another comment\nFROM ${ENV_IMAGE}\n"
                                                      "COPY --link --from=tier-matrix-six /opt/stage/ /\n")
    assert _key(added, wheelhouse=wheels) == key
    assert _key(DOCKERFILE.replace("# layer 2 of the environment: the matrix's package numpy", "# layer 2: aaa"),
                wheelhouse=wheels) == key
    assert _key(args={"CREATED": "2026-12-07"}, wheelhouse=wheels) == key
    assert _key(args={"PIP_EXTRA_INDEX_URL": "https://other:secret@idx"}, wheelhouse=wheels) == key
    assert _key(files={"files/entrypoint": b"#!/bin/bash\n"}, wheelhouse=wheels) == key
    assert _key(DOCKERFILE.replace("RUN pip install numpy", "RUN pip install numpy==2"), wheelhouse=wheels) == key
    # what does: the env tiers' pinned lists, their stages, their declared args, the parent, the platform, the wheels
    assert _key(key_text=b"torch==2.13.1\n", wheelhouse=wheels) != key
    assert _key(DOCKERFILE.replace("RUN apt-get install gcc", "RUN apt-get install gcc g++"), wheelhouse=wheels) != key
    assert _key(DOCKERFILE.replace("RUN pip install torch", "RUN pip install -U torch"), wheelhouse=wheels) != key
    assert _key(args={"SOURCE_DATE_EPOCH": "1"}, wheelhouse=wheels) != key
    assert _key(parent="sha256:" + "ef" * 32, wheelhouse=wheels) != key
    assert _key(platform="linux/arm64", wheelhouse=wheels) != key
    (wheels / "torch.whl").write_bytes(b"two")  # a rewritten wheel: new bytes, a new date (the digest cache's key)
    os.utime(wheels / "torch.whl", ns=(0, (wheels / "torch.whl").stat().st_mtime_ns + 1_000_000_000))
    assert _key(wheelhouse=wheels) != key
    assert len(key) == 64 and SECRET not in json.dumps(key)


def _child_layout(tmp_path: Path) -> Path:
    """The fixture export's blobs in an OCI layout, as `type=oci,tar=false` writes them."""
    layout = tmp_path / "oci"
    (layout / "blobs" / "sha256").mkdir(parents=True)
    with tarfile.open(CHILD) as tar:
        for m in tar.getmembers():
            if m.name.startswith("blobs/sha256/"):
                (layout / m.name).write_bytes(tar.extractfile(m).read())
    return layout


def test_the_exported_manifest_is_written_again_as_one_build_writes_it(tmp_path):
    from imagebuild.engine import held

    layout = _child_layout(tmp_path)
    before = held.layout_blobs(layout)
    assert AS_EXPORTED in before
    assert envimage.annotate_like_one_build(layout, AS_EXPORTED, ENV_LAYERS) == ONE_BUILD
    manifest = held.manifest_of(layout, ONE_BUILD)  # its bytes hash to the one build's digest
    assert [x["annotations"] for x in manifest["layers"]] == [{envimage.REWRITTEN: "0"}] * 3
    assert held.layout_blobs(layout) == before | {ONE_BUILD}  # one blob added, nothing else touched


@pytest.mark.parametrize("change,why", [
    (lambda m: json.dumps(m, separators=(",", ":")).encode(), "not written as this backend writes it"),
    (lambda m: _dump({**m, "layers": [{**x, "annotations": {}} for x in m["layers"]]}), "not re-dated above"),
    (lambda m: _dump({**m, "layers": m["layers"][:2]}), "no layers above the env image's 2"),
    (lambda m: b"[1, 2", "not JSON"),
])
def test_a_manifest_not_as_expected_is_refused(change, why):
    with tarfile.open(CHILD) as tar:
        raw = tar.extractfile(f"blobs/sha256/{AS_EXPORTED[7:]}").read()
    assert envimage.one_build_manifest(raw, 2) != raw
    with pytest.raises(envimage.ManifestNotAsExpected, match=why):
        envimage.one_build_manifest(change(json.loads(raw)), 2)


def test_an_image_not_standing_on_the_env_image_is_refused(tmp_path):
    from imagebuild.engine import held

    layout = _child_layout(tmp_path)
    before = held.layout_blobs(layout)
    with pytest.raises(envimage.ManifestNotAsExpected, match="does not stand on the env image"):
        envimage.annotate_like_one_build(layout, AS_EXPORTED, ["sha256:" + "00" * 32])
    with pytest.raises(envimage.ManifestNotAsExpected, match="the exported manifest or config"):
        envimage.annotate_like_one_build(layout, "sha256:" + "0" * 64, ENV_LAYERS)  # no such manifest
    assert held.layout_blobs(layout) == before  # refused before anything was written


def _dump(manifest: dict) -> bytes:
    return json.dumps(manifest, indent=2).encode()


@pytest.fixture()
def containerd(tmp_path, monkeypatch):
    state = install_fake_docker(tmp_path, monkeypatch, built=BUILT)
    monkeypatch.setenv("FAKE_DRIVER_STATUS", '[["driver-type","io.containerd.snapshotter.v1"]]')
    return state


def _request() -> BuildRequest:
    return BuildRequest(tag="reg/torch:2.13-runtime", dockerfile=DOCKERFILE, timeout=30, labels={"io.x": "1"},
                        build_args={"SOURCE_DATE_EPOCH": "0", "CREATED": "0"}, parents={"BASE_IMAGE": PARENT},
                        secret_build_args={"PIP_EXTRA_INDEX_URL": SECRET},
                        context_files={"files/entrypoint": b"#!/bin/sh\n", "files/imagebuild-tiers.json": b"{}"})


def _builds(state: Path) -> list[list[str]]:
    lines = (state / "builds.jsonl").read_text().splitlines()
    (state / "builds.jsonl").unlink()
    return [json.loads(line)["argv"] for line in lines]


def _value(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_the_env_image_is_built_once_for_its_key_then_taken_again(containerd, monkeypatch):
    monkeypatch.setenv("FAKE_ARCHIVE", str(CHILD))
    monkeypatch.setenv("FAKE_ENV_LAYERS", json.dumps(ENV_LAYERS))
    backend = preflight(None)
    assert backend.via_layout
    build = backend.start(_request())
    events = list(build.events())
    assert build.outcome().image_id == BUILT, build.outcome().error
    key_call, env_call, image_call = _builds(containerd)
    # 1: the env-key stage's files, nothing tagged or labelled
    assert _value(key_call, "--target") == ["env-key"] and "--tag" not in key_call and "--label" not in key_call
    assert [o for o in _value(key_call, "--output") if o.startswith("type=local,dest=")]
    # 2: the env image, tagged by its key, without the image's labels, re-dated and exported as the image is
    [ref] = _value(env_call, "--tag")
    assert ref.startswith("imagebuild-env:") and len(ref.split(":")[1]) == 64
    assert _value(env_call, "--target") == ["env"] and "--label" not in env_call
    assert _value(env_call, "--output")[0].endswith(",rewrite-timestamp=true,compression=zstd,compression-level=3,"
                                                    "force-compression=true,oci-mediatypes=true")
    # 3: the image, standing on that env image through ENV_IMAGE: its plain tag (the exporter then skips its layers)
    assert f"{ENV_ARG}={ref}" in _value(image_call, "--build-arg")
    assert not any(c.startswith(envimage.ENV_CONTEXT) for c in _value(image_call, "--build-context"))
    assert "--target" not in image_call and _value(image_call, "--tag") == ["reg/torch:2.13-runtime"]
    assert "io.x=1" in _value(image_call, "--label")
    for argv in (key_call, env_call, image_call):  # the parent by its pin everywhere, the secret never in an argv
        assert f"imagebuild-base=docker-image://imagebuild-pin:{PARENT[7:]}" in argv
        assert not any("Pa55w0rd" in a for a in argv)
    phases = build.outcome().phases
    assert [(p.kind, p.cached) for p in phases if p.kind == "env"] == [("env", False)]
    assert any(p.name.startswith("env image: ") for p in phases)  # the env build's own rows, named so
    assert "loading the env image into the engine" in [e.text for e in events if e.kind == "step"]
    # the image's own export, loaded last, with the manifest one build writes, without the env image's layers
    env_load, image_load = loads(containerd)
    assert env_load["name"] == f"docker.io/library/{ref}"
    assert image_load["digest"] == ONE_BUILD and image_load["name"] == "docker.io/reg/torch:2.13-runtime"
    assert image_load["layers"] == [False, False, True]  # the env image's two: the engine holds them
    assert any(p.name == "the env image's layers marked re-dated, as one build marks them" for p in phases)

    # the same inputs again: the key's files, then the image; the env image is the engine's
    build = backend.start(_request())
    list(build.events())
    assert build.outcome().image_id == BUILT
    key_call, image_call = _builds(containerd)
    assert f"{ENV_ARG}={ref}" in _value(image_call, "--build-arg")
    assert [(p.kind, p.cached) for p in build.outcome().phases if p.kind == "env"] == [("env", True)]

    # another torch pinned by the resolve: another key, the env image built again
    monkeypatch.setenv("FAKE_KEY_TEXT", "torch==2.13.1\n")
    build = backend.start(_request())
    list(build.events())
    key_call, env_call, image_call = _builds(containerd)
    assert _value(env_call, "--tag") != [ref]


def test_a_manifest_it_cannot_write_again_builds_the_image_as_one_build_would(containerd, monkeypatch):
    """The fake's archive is no OCI archive: the backend says so in one line and exports the image again with the
    env image as a named context (every layer re-dated, the one-build manifest written by BuildKit itself)."""
    build = preflight(None).start(_request())
    events = list(build.events())
    assert build.outcome().image_id == BUILT, build.outcome().error
    key_call, env_call, plain, again = _builds(containerd)
    [ref] = _value(env_call, "--tag")
    assert f"{ENV_ARG}={ref}" in _value(plain, "--build-arg")
    assert f"{ENV_ARG}={envimage.ENV_CONTEXT}" in _value(again, "--build-arg")
    assert f"{envimage.ENV_CONTEXT}=docker-image://{ref}" in _value(again, "--build-context")
    assert [e.text for e in events if e.kind == "line" and "again with the env image re-dated" in e.text]
    assert loads(containerd)[-1]["layers"] == [True]  # the fake's own image: nothing of it was in the layout


def test_a_failing_env_build_fails_the_image_naming_its_step(containerd, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL_TARGET", "env")
    monkeypatch.setenv("FAKE_FAIL_STREAM", str(FIXTURES / "failed-run.rawjson"))
    build = preflight(None).start(_request())
    events = list(build.events())
    outcome = build.outcome()
    assert outcome.failed and outcome.image_id is None
    assert outcome.error.startswith("[pip 1/2] RUN echo collecting six") and "exit code: 3" in outcome.error
    assert sum(e.kind == "error" for e in events) == 1
    assert len(_builds(containerd)) == 2  # the key's files, the env image; never the image
    assert not (containerd / "loaded").exists()


def test_without_the_containerd_store_the_image_is_one_build(containerd, monkeypatch):
    monkeypatch.setenv("FAKE_DRIVER_STATUS", '[["Backing Filesystem","extfs"]]')
    backend = preflight(None)
    assert not backend.via_layout  # the engine's own exporter: nothing re-dated, nothing to skip
    build = backend.start(_request())
    list(build.events())
    assert build.outcome().image_id == BUILT
    [argv] = _builds(containerd)
    assert "--target" not in argv and not any(a.startswith(f"{ENV_ARG}=") for a in argv)


def test_the_registry_cache_of_a_split_runtime_has_its_env_part():
    from imagebuild.builder.backends.buildkit.build import BuildxBackend

    backend = BuildxBackend(cache_repository="reg.example/ml/cache")
    image = backend.cache_flags("r/t:2.13-runtime", split=True)
    assert _value(list(image), "--cache-from") == ["type=registry,ref=reg.example/ml/cache:2.13-runtime",
                                                   "type=registry,ref=reg.example/ml/cache:2.13-runtime-env"]
    assert _value(list(image), "--cache-to") == ["type=registry,ref=reg.example/ml/cache:2.13-runtime,mode=max,"
                                                 "ignore-error=true"]
    env = backend.cache_flags("r/t:2.13-runtime", "env", split=True)
    assert _value(list(env), "--cache-to")[0].startswith("type=registry,ref=reg.example/ml/cache:2.13-runtime-env,")
    assert "--cache-to" not in backend.cache_flags("r/t:2.13-runtime", "key", split=True)
    # an image built in one piece (base, dev): one import and one export of its own tag, as before
    assert backend.cache_flags("r/t:2.13-base") == (
        "--cache-from", "type=registry,ref=reg.example/ml/cache:2.13-base",
        "--cache-to", "type=registry,ref=reg.example/ml/cache:2.13-base,mode=max,ignore-error=true")


def test_the_rendered_runtime_splits():
    """The runtime the render writes is what the backend splits (and base and dev are not)."""
    from imagebuild.render import render_image

    runtime = render_image(replace(CPU, pip_packages={"runtime": ("numpy",)}), "runtime").dockerfile
    assert envimage.splits(runtime)
    assert [s.name for s in envimage.env_closure(runtime)] == ["tier-torch", "env"]
    assert not envimage.splits(render_image(CPU, "dev").dockerfile)
    assert not envimage.splits(render_image(CPU, "base").dockerfile)
