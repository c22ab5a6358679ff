"""The smoke suite against real images on a real engine.

Images: the real runtime and dev images of images/cpu.yaml, built once per session (conftest.cpu_build) and their
passing runs read from the session's one `imagebuild test` of them (conftest.cpu_tested), or
IMAGEBUILD_SMOKE_IMAGE / IMAGEBUILD_SMOKE_DEV_IMAGE (any image with truthful io.imagebuild.* labels), run here. Deliberately
broken images (wrong torch label, default user without a passwd entry; no compiler; a stand-in TE) are derived from
the runtime image by the run's image provider (conftest.derive, _images.py), removed at the end unless
IMAGEBUILD_SMOKE_KEEP=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from imagebuild.engine import ContainerSettings
from imagebuild.smoke import probe as P
from imagebuild.smoke import runner

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("docker_cli"),
              pytest.mark.cpu_images("cpu_build", "cpu_tested")]
PREFIX = "ibdev-smoke"
WHEELHOUSE = os.environ.get("IMAGEBUILD_WHEELHOUSE", "/opt/wheels")
CA = os.environ.get("IMAGEBUILD_CA_CERT", os.environ.get("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt"))

BROKEN_LINES = """\
USER root
RUN userdel -r ml
USER 1000
LABEL io.imagebuild.torch=0.0.1
"""

# torch.compile's needs taken away: the C++ compiler, Python.h, and numpy (release smoke: numpy interop)
BROKEN_TOOLCHAIN_LINES = """\
USER root
RUN rm -f /usr/bin/g++ /usr/bin/g++-* /usr/bin/x86_64-linux-gnu-g++* /usr/bin/c++ /etc/alternatives/c++ \\
        /usr/include/python3*/Python.h \\
 && rm -rf /opt/venv/lib/python3*/site-packages/numpy
USER 1000
"""


def _cpu_image(request, flavor: str) -> str:
    """The real images/cpu.yaml image of `flavor`, built once per session (conftest.cpu_build)."""
    build = request.getfixturevalue("cpu_build")
    assert build.result.returncode == 0, build.result.stdout[-3000:] + build.result.stderr[-3000:]
    return next(i.tag for i in build.plan.images if i.flavor == flavor)


@pytest.fixture(scope="module")
def runtime_image(request):
    return os.environ.get("IMAGEBUILD_SMOKE_IMAGE") or _cpu_image(request, "runtime")


@pytest.fixture(scope="module")
def broken_image(derive, runtime_image):
    return derive("broken", runtime_image, BROKEN_LINES)


def _by_name(tests):
    return {c["name"]: c for c in tests["checks"]}


def _gone(client, name):
    return not client.containers.list(all=True, filters={"name": name})


def _passing_run(request, client, flavor: str, tmp_path: Path) -> tuple[str, dict]:
    """(image, the suite's result) of the real `flavor` image: IMAGEBUILD_SMOKE_IMAGE / _DEV_IMAGE run here through
    the runner; the session's images/cpu.yaml image is read from the session's one `imagebuild test` of it
    (conftest.cpu_tested: the same runner, with --junit and --results), not run a second time."""
    given = os.environ.get("IMAGEBUILD_SMOKE_IMAGE" if flavor == "runtime" else "IMAGEBUILD_SMOKE_DEV_IMAGE")
    if given:
        return given, runner.run_smoke(given, name_prefix=PREFIX, junit_dir=tmp_path / "junit",
                                       result_dir=tmp_path / "results", client=client)
    tested = request.getfixturevalue("cpu_tested")
    assert tested.result.returncode == 0, tested.result.stdout[-3000:] + tested.result.stderr[-3000:]
    row = next(r for r in json.loads(tested.result.stdout) if r["flavor"] == flavor)
    assert row["image"] == _cpu_image(request, flavor)  # the tag; the ID that ran is row["image_id"]
    assert row["image_id"] == client.api.inspect_image(row["image"])["Id"]
    # the runner's result file of that run (--results): named as its JUnit file
    row["result_json"] = str(tested.results_dir / (Path(row["junit"]).stem + ".json"))
    return row["image"], row


def test_runtime_image_passes(request, client, tmp_path):
    runtime_image, tests = _passing_run(request, client, "runtime", tmp_path)
    c = _by_name(tests)
    failed = {n: x["reason"] for n, x in c.items() if x["status"] == "failed"}
    print(f"\nsmoke {runtime_image}: {tests.get('seconds')}s total, probe {tests.get('probe_seconds')}s, "
          f"{tests['docker_exec']} docker exec, {tests['passed']} passed / {tests['skipped']} skipped")
    assert not failed, failed
    assert tests["docker_exec"] <= 5
    assert c["amp.cpu_bf16"]["status"] == "passed" and c["amp.cpu_bf16"]["figures"]["mode"] == "cpu-bf16"
    assert c["distributed.gloo"]["status"] == "passed"
    assert c["distributed.gloo"]["figures"]["backend"] == "gloo"
    assert c["versions/version[torch]"]["status"] == "passed"
    assert c["runtime_contract/default_user"]["status"] == "passed"
    # torch.compile really compiled (Inductor C++ kernels) and PyTorch's release smoke checks pass
    for name in ("compile.toolchain", "compile.cpu_function", "compile.cpu_module", "compile.cpu_max_autotune",
                 "release.openmp", "release.cpu_isa", "release.conv2d_cpu",
                 "release.linalg_cpu", "release.numpy"):
        assert c[name]["status"] == "passed", c[name]
    assert c["compile.cpu_function"]["reason"].endswith("(C++ kernel)")
    if not tests["gpu"]:
        for name in ("gpu.available", "amp.cuda_fp16", "amp.cuda_bf16", "tf32.speedup",
                     "distributed.nccl"):
            assert c[name]["status"] == "skipped" and c[name]["reason"].startswith(P.NO_GPU), c[name]
    assert not any(n.startswith("dev.") for n in c)  # runtime flavor: dev checks deselected
    junit = ET.parse(tests["junit"]).getroot()
    suite = junit if junit.tag == "testsuite" else junit.find("testsuite")
    assert int(suite.get("failures")) == 0 and int(suite.get("tests")) == len(tests["checks"])
    doc = json.loads(Path(tests["result_json"]).read_text())
    assert doc["probe"]["versions"]["torch"] and doc["passed"] == tests["passed"]
    assert _gone(client, tests["container"])


def _narrow(*sections: str):
    """The `sections` parameter of a derived image's test: in make test only the probe sections what it breaks
    belongs to (`imagebuild test --sections`; the replay of recorded results proves that a narrowed run reports the
    whole run's rows: tests/unit/test_smoke_recorded.py); the whole suite, which shows nothing else fails, in the
    full tier."""
    return pytest.mark.parametrize("sections", [pytest.param(sections, id="sections"),
                                                pytest.param(None, id="whole-suite", marks=pytest.mark.full_tier)])


@_narrow("versions", "system", "uid")
def test_broken_image_fails_the_right_checks(client, broken_image, sections):
    tests = runner.run_smoke(broken_image, name_prefix=PREFIX, client=client, sections=sections)
    assert bool(sections) == any("(--sections): not the whole suite" in n for n in tests.get("notes") or ())
    failed = {c["name"]: c["reason"] for c in tests["checks"] if c["status"] == "failed"}
    # userdel -r also removed /home/ml: HOME (fixed in ENV) is gone for the arbitrary UID too
    assert set(failed) == {"versions/version[torch]", "runtime_contract/default_user",
                           "uid.home_writable"}, failed
    assert failed["versions/version[torch]"].startswith("torch: expected 0.0.1 (label io.imagebuild.torch), found ")
    assert failed["runtime_contract/default_user"] == "user: expected ml, found uid 1000 without a passwd entry"
    assert _gone(client, tests["container"])

# A stand-in transformer_engine whose `transformer_engine.pytorch` loads one library at import, the way TE's loader
# does: a CUDA library the image lacks (a broken install) or only the driver's libcuda.so.1 (fine on a GPU host).
FAKE_TE_LINES = """\
USER root
RUN set -e; site="$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"; \\
    mkdir -p "$site/transformer_engine/pytorch" "$site/transformer_engine-0.0.1.dist-info"; \\
    printf 'Metadata-Version: 2.1\\nName: transformer_engine\\nVersion: 0.0.1\\n' \\
        > "$site/transformer_engine-0.0.1.dist-info/METADATA"; \\
    touch "$site/transformer_engine/__init__.py"; \\
    printf 'import ctypes\\nctypes.CDLL("{lib}")\\n' > "$site/transformer_engine/pytorch/__init__.py"
USER 1000
"""


@_narrow("te", "hpc", "versions")
@pytest.mark.parametrize("lib, status", [("libcudart.so.12", "failed"), ("libcuda.so.1", "skipped")])
def test_te_import_tells_a_broken_install_from_a_missing_driver(client, derive, runtime_image, lib, status, sections):
    image = derive(f"fake-te-{lib.split('.')[0]}", runtime_image, FAKE_TE_LINES.format(lib=lib))
    tests = runner.run_smoke(image, name_prefix=PREFIX, client=client, sections=sections)
    c = _by_name(tests)
    failed = {n for n, x in c.items() if x["status"] == "failed"}
    assert c["te.import"]["status"] == status, c["te.import"]
    # started as enroot/Apptainer start it, the image gives the same answer (the same rule for a missing driver)
    assert c["hpc.te"]["status"] == status, c["hpc.te"]
    # the image's label says "no transformer_engine" and one is installed: the version check says so too
    assert failed - {"te.import", "hpc.te"} == {"versions/version[transformer_engine]"}, failed
    if status == "failed":
        assert lib in c["te.import"]["reason"]
    else:
        assert c["te.import"]["reason"].startswith("needs the NVIDIA driver (libcuda)")
    assert _gone(client, tests["container"])


@pytest.fixture(scope="module")
def broken_toolchain_image(derive, runtime_image):
    return derive("broken-toolchain", runtime_image, BROKEN_TOOLCHAIN_LINES)


@pytest.mark.full_tier  # make test: tests/unit/test_probe_compile.py (torch.compile on the host without its g++)
@_narrow("compile", "release", "hpc")
def test_runtime_without_compiler_fails_compile_checks_naming_what_is_missing(client, broken_toolchain_image,
                                                                              sections):
    tests = runner.run_smoke(broken_toolchain_image, name_prefix=PREFIX, client=client, sections=sections)
    failed = {c["name"]: c["reason"] for c in tests["checks"] if c["status"] == "failed"}
    # started as enroot/Apptainer start it (the hpc section), torch.compile fails the same way
    assert set(failed) == {"compile.toolchain", "compile.cpu_function", "compile.cpu_module",
                           "compile.cpu_max_autotune", "release.cpu_isa", "release.numpy",
                           "hpc.compile"}, failed
    for name in ("compile.toolchain", "compile.cpu_function", "compile.cpu_module", "release.cpu_isa"):
        assert "C++ compiler (g++)" in failed[name] and "Python.h" in failed[name], failed[name]
    assert "InvalidCxxCompiler" in failed["compile.cpu_function"]
    assert failed["release.numpy"].startswith("release.numpy: numpy is not installed")
    assert _gone(client, tests["container"])


@pytest.mark.full_tier  # make test: tests/unit/test_smoke_recorded.py, on recorded results
def test_expect_overrides_name_key_expected_found(client, runtime_image):
    tests = runner.run_smoke(runtime_image, expectations={"torch": "2.9.1", "os": "ubuntu24.04"},
                             name_prefix=PREFIX, client=client)
    failed = {c["name"]: c["reason"] for c in tests["checks"] if c["status"] == "failed"}
    assert set(failed) == {"versions/version[torch]", "versions/os"}, failed
    assert failed["versions/version[torch]"].startswith("torch: expected 2.9.1 (--expect torch), found ")
    assert failed["versions/os"].startswith("os: expected ubuntu24.04 (--expect os), found debian12")


@pytest.mark.full_tier  # make test: tests/unit/test_smoke_recorded.py, on recorded results
def test_require_gpu_turns_gpu_skips_into_failures(client, runtime_image):
    tests = runner.run_smoke(runtime_image, expectations={"cuda": "12.8"}, require_gpu=True,
                             name_prefix=PREFIX, client=client)
    c = _by_name(tests)
    if tests["gpu"]:
        pytest.skip("this host has a GPU")
    assert c["gpu.available"]["status"] == "failed"
    assert c["gpu.available"]["reason"].startswith(P.NO_GPU) and "(--require-gpu)" in c["gpu.available"]["reason"]
    assert c["amp.cpu_bf16"]["status"] == "passed"


@pytest.mark.parametrize("flavor", [
    pytest.param("base", id="base-sections"),  # make test: the suite's base sections (its start, the probe twice)
    pytest.param("runtime", id="whole-suite", marks=pytest.mark.full_tier),  # the runtime suite a third time
])
def test_plain_pytest_against_a_running_container(client, runtime_image, tmp_path, flavor):
    name = f"{PREFIX}-plain-{uuid.uuid4().hex[:6]}"
    kw = ContainerSettings(image=runtime_image, name=name).kwargs()
    kw["ulimits"] = kw["ulimits"][1:]  # engines in user namespaces refuse memlock=-1
    c = client.containers.run(**kw)
    try:
        out = subprocess.run([sys.executable, "-m", "pytest", f"--hosts=docker://{name}", str(runner.SUITE_DIR),
                              "-q", "-p", "no:cacheprovider", "--smoke-json", str(tmp_path / "r.json"),
                              "--flavor", flavor],
                             capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert out.returncode == 0, out.stdout[-3000:]
        doc = json.loads((tmp_path / "r.json").read_text())
        host = next(iter(doc["hosts"].values()))
        # the probe runs once as the image's user and once as root (the hygiene check reads /root)
        assert host["docker_exec"] == 2 and host["flavor"] == flavor and doc["failed"] == 0 and doc["passed"] > 0
    finally:
        c.remove(force=True)


def test_timeout_still_removes_container(client, runtime_image):
    tests = runner.run_smoke(runtime_image, timeout=3, name_prefix=PREFIX, client=client)
    assert tests["failed"] == 1 and tests["checks"][0]["name"] == "suite/timeout"
    assert _gone(client, tests["container"])


def test_dev_image(request, client, tmp_path):
    dev_image, tests = _passing_run(request, client, "dev", tmp_path)
    c = _by_name(tests)
    print(f"\nsmoke dev {dev_image}: {tests.get('seconds')}s, {tests.get('docker_exec')} docker exec")
    for name in ("dev.cpp_extension", "dev.jupyter", "dev.sshd"):
        assert c[name]["status"] == "passed", c[name]
    assert c["dev.jupyter"]["figures"]["with_token"] == 200
    assert c["dev.jupyter"]["figures"]["without_token"] in (401, 403)
    assert c["dev.sshd"]["figures"]["passwordauthentication"] == "no"
    assert c["dev.nvcc"]["status"] in ("skipped", "passed")
    assert tests["failed"] == 0 and tests["docker_exec"] <= 5


def test_cli_exit_codes(runtime_image, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(Path(runner.__file__).parents[2]))
    # a passing run exits 0 (the base flavor's sections: the whole runtime suite's exit 0 is test_pipeline_cpu's)
    ok = subprocess.run([sys.executable, "-m", "imagebuild", "test", "--image", runtime_image, "--flavor", "base",
                         "--junit", str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[0].split()[:3] == ["IMAGE", "FLAVOR", "PASS"]
    # a failed check exits 1: the base flavor's sections (the versions check among them) are enough to show it
    bad = subprocess.run([sys.executable, "-m", "imagebuild", "test", "--image", runtime_image, "--flavor", "base",
                          "--expect", "python=3.99"], capture_output=True, text=True, env=env, timeout=600)
    assert bad.returncode == 1 and "python: expected 3.99 (--expect python), found 3.11" in bad.stdout
