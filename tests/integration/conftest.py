"""Shared integration fixtures: a real registry and the real CPU matrix, built once per test session.

Everything here is real: the Docker engine `DOCKER_HOST` points at (scripts/run-tests.sh starts a private one with
an empty data-root, so nothing can pass on leftovers), Debian's docker-registry on 127.0.0.1 with htpasswd auth,
images bootstrapped from the Debian mirror. Image names carry the registry's random port and a random namespace, and
`--force` makes even a warm engine run every build step's cache check again.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _helpers import BK_HOST, ROOT, bk_args, bk_env, imagebuild, start_registry, stop_registry  # noqa: E402
from _helpers import PASSWORD as PUSH_PASSWORD  # noqa: E402
from _helpers import USER as PUSH_USER  # noqa: E402

WHEELHOUSE = Path(os.environ.get("IMAGEBUILD_WHEELHOUSE") or os.environ.get("PIP_FIND_LINKS") or "/opt/wheels")
CA = os.environ.get("IMAGEBUILD_CA_CERT") or os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
USER = "ibci"


@pytest.fixture(scope="session", autouse=True)
def _private_state_dir(tmp_path_factory):
    """The records (.imagebuild/<matrix>.state.json) of this session live in its own folder, never the checkout's."""
    old = os.environ.get("IMAGEBUILD_STATE_DIR")
    os.environ["IMAGEBUILD_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    yield
    if old is None:
        os.environ.pop("IMAGEBUILD_STATE_DIR", None)
    else:
        os.environ["IMAGEBUILD_STATE_DIR"] = old


@pytest.fixture(scope="session", autouse=True)
def _required_parts():
    """Under `make test` / CI (IMAGEBUILD_REQUIRE_ENGINE=1) a missing engine or tool is an error, not a skip."""
    if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") != "1":
        return
    import docker

    docker.from_env(timeout=30).ping()
    for tool in ("mmdebstrap", "docker-registry", "htpasswd", "docker"):
        assert shutil.which(tool), f"{tool} is not installed (scripts/system-deps.sh installs it)"
    assert list(WHEELHOUSE.glob("torch-2.13.0*cp311*.whl")), f"no torch 2.13.0 cp311 wheel in {WHEELHOUSE}"


@dataclass
class Registry:
    address: str  # 127.0.0.1:PORT
    directory: str
    user: str
    password: str


@pytest.fixture(scope="session")
def auth_registry():
    if not shutil.which("docker-registry"):
        pytest.skip("docker-registry not installed (scripts/system-deps.sh)")
    password = secrets.token_hex(12)
    info = start_registry(USER, password)
    yield Registry(info["REGISTRY"], info["REGISTRY_DIR"], USER, password)
    stop_registry(info)


@pytest.fixture(scope="session")
def client():
    """The one engine connection of the integration tests (imagebuild.engine.connect, with a read timeout long enough
    for multi-GB commits and pushes); skips without an engine."""
    from imagebuild.engine import connect
    from imagebuild.errors import EngineUnavailable

    try:
        engine = connect(timeout=900)
    except EngineUnavailable as exc:
        pytest.skip(str(exc))
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def docker_cli():
    """testinfra's docker backend runs the docker CLI: skip without it."""
    if not shutil.which("docker"):
        pytest.skip("the docker CLI (testinfra's docker backend) is not installed")


@pytest.fixture(scope="module")
def docker_client(client):
    """The engine for the push tests (skips without docker-registry or an engine)."""
    if not Path("/usr/bin/docker-registry").exists() and not shutil.which("docker-registry"):
        pytest.skip("docker-registry not installed (apt-get install docker-registry)")
    return client


@pytest.fixture(scope="module")
def registry(docker_client):
    """A registry for the push tests, user _helpers.USER: scripts/registry.sh's REGISTRY=… lines as a dict."""
    info = start_registry(PUSH_USER, PUSH_PASSWORD)
    yield info
    stop_registry(info)


@dataclass
class CpuBuild:
    client: object
    plan: object
    result: subprocess.CompletedProcess
    tmp: Path
    registry: Registry
    prefix: str  # --registry given to every command: 127.0.0.1:PORT/ibtest-xxxx

    def args(self, *extra: str) -> list[str]:
        return ["--matrix", str(ROOT / "images" / "cpu.yaml"), "--registry", self.prefix, *extra]

    def build_args(self) -> list[str]:
        return self.args("--wheelhouse", str(WHEELHOUSE), "--ca-cert", CA, "--torch-index-url", "none", "--plain",
                         "--log-dir", str(self.tmp / "logs"), "--report-dir", str(self.tmp / "report"))


@pytest.fixture(scope="session")
def cpu_build(auth_registry, client, tmp_path_factory):
    """images/cpu.yaml built for real (bootstrap Debian 12 → base → runtime → dev), tagged for the test registry."""
    from imagebuild.inputs import BuildInputs
    from imagebuild.plan import make_plan

    if not list(WHEELHOUSE.glob("torch-2.13.0*cp311*.whl")):
        pytest.skip(f"no torch 2.13.0 cp311 wheel in {WHEELHOUSE}")
    tmp = tmp_path_factory.mktemp("cpu")
    prefix = f"{auth_registry.address}/ibtest-{secrets.token_hex(4)}"
    plan = make_plan(ROOT / "images" / "cpu.yaml",
                     BuildInputs(ca_certs=(Path(CA),), torch_index_url="none", wheelhouse=WHEELHOUSE), prefix)
    build = CpuBuild(client, plan, None, tmp, auth_registry, prefix)  # type: ignore[arg-type]
    # a proxy variable that must never reach the image (build arg only)
    build.result = imagebuild("build", *build.build_args(), "--force", env={"no_proxy": "ibtest-noproxy.invalid"})
    yield build
    for img in plan.images:
        for ref in (img.tag, *img.aliases):
            try:
                client.api.remove_image(ref, force=True)
            except Exception:
                pass


@pytest.fixture(scope="session")
def bk_build(cpu_build, tmp_path_factory):
    """images/cpu.yaml built (--force) and smoke-tested through the BuildKit backend on the modern engine, once per
    session (test_buildkit_backend.py compares it with cpu_build; test_env_layers.py rebuilds its runtime with one
    package more): (CompletedProcess, docker client of that engine, its folder: report/, logs/, state/)."""
    if not BK_HOST:
        if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
            pytest.fail("IMAGEBUILD_BUILDKIT_HOST is not set: scripts/run-tests.sh starts the modern engine")
        pytest.skip("no modern engine: eval \"$(scripts/modern-engine.sh --fresh DIR)\" and set "
                    "IMAGEBUILD_BUILDKIT_HOST to its DOCKER_HOST")
    import docker

    tmp = tmp_path_factory.mktemp("bk")
    result = imagebuild("build", *bk_args(cpu_build, tmp), env=bk_env(tmp / "state"), timeout=3600)
    client = docker.DockerClient(base_url=BK_HOST, timeout=600)
    yield result, client, tmp
    client.close()
