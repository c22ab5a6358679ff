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
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _helpers import BK_HOST, start_registry, stop_registry  # noqa: E402
from _helpers import PASSWORD as PUSH_PASSWORD  # noqa: E402
from _helpers import USER as PUSH_USER  # noqa: E402
from _images import BUILDS_ENDED, WHEELHOUSE, ImageProvider, touch_file  # noqa: E402

SEED_VARIABLE = "IMAGEBUILD_TEST_SEED"


def _order_seed() -> int | None:
    """The integration tests run in a random order (files shuffled, then the tests inside each file): a test that
    passes only after another one fails somewhere. IMAGEBUILD_TEST_SEED=N repeats an order, =none keeps file order."""
    value = os.environ.get(SEED_VARIABLE, "")
    if value == "none":
        return None
    if value:
        try:
            return int(value)
        except ValueError:
            raise pytest.UsageError(f"{SEED_VARIABLE}={value!r}: not a number; choices: an integer, none") from None
    seed = secrets.randbelow(1_000_000)
    os.environ[SEED_VARIABLE] = str(seed)  # the same seed in pytest's header and for any child that asks
    return seed


def pytest_report_header(config):
    seed = os.environ.get(SEED_VARIABLE, "")
    if seed and seed != "none":
        return f"integration order: random, {SEED_VARIABLE}={seed} repeats it"
    return "integration order: file order"


def pytest_collection_modifyitems(session, config, items):
    seed = _order_seed()
    mine = [i for i in items if Path(str(i.fspath)).parent == Path(__file__).parent]
    if seed is None or not mine:
        return
    import random

    rng = random.Random(seed)
    by_file: dict[str, list] = {}
    for item in mine:
        by_file.setdefault(str(item.fspath), []).append(item)
    # the files that need none of the session's matrix images first (each group in a random order): they run while
    # those images build in the background (_start_the_matrix_builds)
    files = sorted(by_file)
    rng.shuffle(files)
    files.sort(key=lambda name: any(needs_cpu_images(i) for i in by_file[name]))
    order = []
    for name in files:  # a file's tests stay together: its module-scoped fixtures are made once
        tests = by_file[name]
        rng.shuffle(tests)
        order.extend(tests)
    chosen = set(mine)
    items[:] = [i for i in items if i not in chosen] + order


# the fixtures that hand out the session's images/cpu.yaml builds (a test's closure of fixtures names them)
CPU_IMAGE_FIXTURES = ("cpu_build", "cpu_tested", "bk_build", "derive", "provider")


def cpu_image_fixtures(item) -> set[str]:
    """Which of the session's images/cpu.yaml builds `item` uses: through its fixtures, or named by its
    `cpu_images(...)` mark where it asks for them with request.getfixturevalue ("bk_dev": bk_build's dev image too,
    which make test's BuildKit build leaves out)."""
    used = {name for name in CPU_IMAGE_FIXTURES if name in getattr(item, "fixturenames", ())}
    for mark in item.iter_markers("cpu_images"):
        used.update(mark.args)
    return used


def needs_cpu_images(item) -> bool:
    return bool(cpu_image_fixtures(item))


USER = "ibci"


@pytest.fixture(scope="session", autouse=True)
def _private_folders(tmp_path_factory):
    """This session's own folders, never the checkout's or the host's /tmp: the records (IMAGEBUILD_STATE_DIR:
    .imagebuild/<matrix>.state.json) and the push work folders (IMAGEBUILD_PUSH_TMP, push/skopeo.py: a test that drives
    a Pusher directly and never closes it leaves its ~5 MB folder here)."""
    old = {name: os.environ.get(name) for name in ("IMAGEBUILD_STATE_DIR", "IMAGEBUILD_PUSH_TMP")}
    os.environ["IMAGEBUILD_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    os.environ["IMAGEBUILD_PUSH_TMP"] = str(tmp_path_factory.mktemp("push-work"))
    yield
    for name, value in old.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


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
def cosign():
    """The real cosign (make install's, or IMAGEBUILD_COSIGN): a failure under make test, a skip with its reason
    elsewhere."""
    from imagebuild.sign import find_cosign

    try:
        return find_cosign()
    except Exception as exc:
        if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
            pytest.fail(f"cosign is missing: {exc}")
        pytest.skip(str(exc))


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


@pytest.fixture(scope="session")
def provider(auth_registry, client, tmp_path_factory):
    """The run's image provider (_images.py): the CPU matrix once per backend, small images derived from it."""
    made = ImageProvider(auth_registry, client, tmp_path_factory.mktemp("images"))
    _PROVIDERS.append(made)
    yield made
    made.cleanup()


_PROVIDERS: list[ImageProvider] = []


def pytest_terminal_summary(terminalreporter):
    for made in _PROVIDERS:
        for line in made.summary():
            terminalreporter.write_line(line)


@pytest.fixture(scope="session", autouse=True)
def _start_the_matrix_builds(request):
    """At the session's start, when any of its tests needs the images/cpu.yaml builds: the BuildKit one (when a test
    asks for `bk_build`) and the classic one followed by its one smoke run (`cpu_tested`), in the background, while
    the tests that need neither run first (pytest_collection_modifyitems orders them so)."""
    used = set().union(*(cpu_image_fixtures(i) for i in request.session.items))
    ended = os.environ.get(BUILDS_ENDED, "")  # scripts/run-tests.sh: the unit tests start when this file is there
    if not used or not list(WHEELHOUSE.glob("torch-2.13.0*cp311*.whl")):
        touch_file(ended)
        return  # (cpu_build skips, saying why)
    try:
        provider = request.getfixturevalue("provider")
    except pytest.skip.Exception:
        touch_file(ended)
        return  # no engine: the tests that need one skip, saying why
    if "bk_dev" in used:  # a full-tier test of the session needs the BuildKit dev image: every flavor
        provider.bk_flavors = ("base", "runtime", "dev")
    if BK_HOST and "bk_build" in used:
        provider.start_buildkit()
    provider.start_classic(smoke="cpu_tested" in used)
    if ended:
        provider.signal_when_built(ended)


@pytest.fixture(scope="session")
def cpu_build(provider, request):
    """images/cpu.yaml built for real (bootstrap Debian 12 → base → runtime → dev), tagged for the test registry:
    started at the session's start in the background (_start_the_matrix_builds), waited for here."""
    if not list(WHEELHOUSE.glob("torch-2.13.0*cp311*.whl")):
        pytest.skip(f"no torch 2.13.0 cp311 wheel in {WHEELHOUSE}")
    return provider.cpu()


@pytest.fixture(scope="session")
def cpu_tested(provider, cpu_build):
    """The smoke suite over cpu_build's three images, run once per session (`imagebuild test --retest --json`)."""
    return provider.cpu_tested()


@pytest.fixture(scope="session")
def bk_build(provider, cpu_build):
    """images/cpu.yaml built (--force) and smoke-tested through the BuildKit backend on the modern engine, once per
    session: base and runtime (provider.bk_flavors), dev too when a test of the session is marked
    cpu_images("bk_dev") (test_buildkit_backend.py compares it with cpu_build; test_env_layers.py rebuilds its runtime
    with one package more): (CompletedProcess, docker client of that engine, its folder: report/, logs/, state/)."""
    if not BK_HOST:
        if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
            pytest.fail("IMAGEBUILD_BUILDKIT_HOST is not set: scripts/run-tests.sh starts the modern engine")
        pytest.skip("no modern engine: eval \"$(scripts/modern-engine.sh --fresh DIR)\" and set "
                    "IMAGEBUILD_BUILDKIT_HOST to its DOCKER_HOST")
    return provider.buildkit(BK_HOST)


@pytest.fixture(scope="session")
def derive(provider):
    """provider.derive: an image FROM a built one plus a few Dockerfile lines (see _images.py)."""
    return provider.derive
