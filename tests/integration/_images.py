"""The integration tests' image provider: every image a test needs, built once per test run and handed out by role.

- The CPU matrix (images/cpu.yaml) per backend: `classic` on the Docker 20.10 engine DOCKER_HOST names, `buildkit`
  on the dockerd 26.1 engine IMAGEBUILD_BUILDKIT_HOST names. Each is built at most once per run, the first time a
  test asks for it (conftest.cpu_build / conftest.bk_build), `--force` so that every step runs its cache check even
  on a warm engine; the plan's inputs hashes key it (`inputs_hash`).
- Derived images: a test that needs a broken or changed image gets one FROM a built image (`derive`): a few
  Dockerfile lines over the parent's image ID, built in seconds, named by the hash of what it is made of (the same
  derivation asked twice is built once), removed when the run ends.

Tests never build images/cpu.yaml themselves and never bootstrap an OS for a broken variant; what this module built
is printed at the end of the run (conftest.pytest_terminal_summary), beside what the engines did
(scripts/engine_counts.py in scripts/run-tests.sh).
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from _helpers import ROOT, bk_args, bk_env

WHEELHOUSE = Path(os.environ.get("IMAGEBUILD_WHEELHOUSE") or os.environ.get("PIP_FIND_LINKS") or "/opt/wheels")
CA = os.environ.get("IMAGEBUILD_CA_CERT") or os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
MATRIX = ROOT / "images" / "cpu.yaml"
MTIME = 1_700_000_000
# a file the provider creates once its background builds have ended (scripts/run-tests.sh waits on it)
BUILDS_ENDED = "IMAGEBUILD_TEST_BUILDS_ENDED"


def touch_file(path: str) -> None:
    """Create `path` (nothing for an empty one; a file that cannot be made is not this run's failure)."""
    if not path:
        return
    try:
        Path(path).touch()
    except OSError:
        pass


@dataclass
class CpuBuild:
    """images/cpu.yaml built on the classic engine for the session's registry prefix."""
    client: object
    plan: object
    result: subprocess.CompletedProcess
    tmp: Path
    registry: object  # conftest.Registry
    prefix: str  # --registry given to every command: 127.0.0.1:PORT/ibtest-xxxx

    def args(self, *extra: str) -> list[str]:
        return ["--matrix", str(MATRIX), "--registry", self.prefix, *extra]

    def build_args(self) -> list[str]:
        return self.args("--wheelhouse", str(WHEELHOUSE), "--ca-cert", CA, "--torch-index-url", "none", "--plain",
                         "--log-dir", str(self.tmp / "logs"), "--report-dir", str(self.tmp / "report"))

    def tag(self, flavor: str) -> str:
        return next(i.tag for i in self.plan.images if i.flavor == flavor)

    def inputs_hash(self, flavor: str) -> str:
        return next(i.inputs_hash for i in self.plan.images if i.flavor == flavor)


@dataclass
class CpuTested:
    """The session's one `imagebuild test` of the classic CPU images (--retest: the suite really runs even where
    another command recorded a pass): its result (--json rows on stdout), report folder and JUnit folder."""
    build: CpuBuild
    result: subprocess.CompletedProcess
    report_dir: Path
    junit_dir: Path
    results_dir: Path  # --results: one JSON per image (the checks and the probe's raw document)


@dataclass
class Built:
    """One thing the provider made: what, on which engine, in how many seconds."""
    what: str
    engine: str
    seconds: float


@dataclass
class ImageProvider:
    registry: object  # conftest.Registry
    client: object  # the classic engine (imagebuild.engine.connect)
    folder: Path
    prefix: str = field(default_factory=lambda: f"ibtest-{secrets.token_hex(4)}")
    made: list[Built] = field(default_factory=list)
    _cpu: CpuBuild | None = None
    _bk: tuple | None = None
    _cpu_tested: CpuTested | None = None
    _planned: CpuBuild | None = None
    _bk_running: tuple | None = None  # (Popen, folder, start time) of the BuildKit build in the background
    # the flavors the BuildKit build makes: make test's base and runtime (what its BuildKit tests use); every flavor
    # when a test of the session asks for the BuildKit dev image (the `cpu_images("bk_dev")` mark: full tier)
    bk_flavors: tuple[str, ...] = ("base", "runtime")
    _derived: dict[str, tuple[object, str]] = field(default_factory=dict)  # key -> (engine client, tag)
    _classic: threading.Thread | None = None  # the classic build and its smoke run, started ahead (start_classic)
    _classic_proc: subprocess.Popen | None = None  # that thread's running CLI process
    _classic_built: threading.Event = field(default_factory=threading.Event)
    _classic_error: BaseException | None = None
    _stopping: bool = False

    # -- the CPU matrix, once per backend -------------------------------------------------------------------------

    def _cpu_plan(self) -> CpuBuild:
        """images/cpu.yaml's plan for the session's registry prefix (no build yet: `result` is None)."""
        if self._planned is None:
            from imagebuild.inputs import BuildInputs
            from imagebuild.plan import make_plan

            tmp = self.folder / "cpu"
            tmp.mkdir(parents=True, exist_ok=True)
            prefix = f"{self.registry.address}/{self.prefix}"
            plan = make_plan(MATRIX, BuildInputs(ca_certs=(Path(CA),), torch_index_url="none", wheelhouse=WHEELHOUSE),
                             prefix)
            self._planned = CpuBuild(self.client, plan, None, tmp, self.registry, prefix)
        return self._planned

    def _cli(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        """The real CLI as _helpers.imagebuild runs it, its process kept so that `cleanup` can stop it."""
        if self._stopping:
            raise RuntimeError("the image provider is stopping")
        full_env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
        argv = [sys.executable, "-m", "imagebuild", *args]
        self._classic_proc = proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                                     stdin=subprocess.DEVNULL, cwd=ROOT, env=full_env)
        try:
            out, err = proc.communicate(timeout=3600)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def _build_classic(self) -> None:
        build = self._cpu_plan()
        t0 = time.monotonic()
        # a proxy variable that must never reach the image (build arg only)
        build.result = self._cli("build", *build.build_args(), "--force", env={"no_proxy": "ibtest-noproxy.invalid"})
        self.made.append(Built("images/cpu.yaml (base, runtime, dev)", "classic", time.monotonic() - t0))
        self._cpu = build

    def _test_classic(self) -> None:
        build = self._cpu
        assert build is not None and build.result.returncode == 0, \
            build.result.stdout[-3000:] + build.result.stderr[-3000:]
        folder = build.tmp / "tested"
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        result = self._cli("test", *build.args("--report-dir", str(folder / "report"), "--junit", str(folder / "junit"),
                                               "--results", str(folder / "results"), "--json", "--retest"))
        self.made.append(Built("images/cpu.yaml smoke (base, runtime, dev)", "classic", time.monotonic() - t0))
        self._cpu_tested = CpuTested(build, result, folder / "report", folder / "junit", folder / "results")

    def start_classic(self, smoke: bool = True) -> None:
        """Start the classic build of images/cpu.yaml and then (`smoke`: a test of the session will ask for it) its one
        smoke run (`cpu_tested`) in a thread of their own, while the tests that need no image of it run (conftest
        orders them first); `cpu` and `cpu_tested` wait for it."""
        if self._classic is not None or self._cpu is not None:
            return
        self._cpu_plan()  # here, not in the thread: start_buildkit plans too

        def work() -> None:
            try:
                self._build_classic()
            except BaseException as exc:  # handed to whoever waits for the build
                self._classic_error = exc
            finally:
                self._classic_built.set()
            try:
                if smoke and self._cpu is not None and self._cpu.result.returncode == 0:
                    self._test_classic()
            except BaseException as exc:
                self._classic_error = exc

        self._classic = threading.Thread(target=work, name="classic images/cpu.yaml", daemon=True)
        self._classic.start()

    def _wait_classic(self, tested: bool) -> None:
        if self._classic is None:
            return
        if tested:
            self._classic.join()
        else:
            self._classic_built.wait()
        if self._classic_error is not None:
            raise RuntimeError("the classic build of images/cpu.yaml (started ahead) failed") from self._classic_error

    def cpu(self) -> CpuBuild:
        """images/cpu.yaml through the classic builder (bootstrap Debian 12 -> base -> runtime -> dev)."""
        self._wait_classic(tested=False)
        if self._cpu is None:
            self._build_classic()
        assert self._cpu is not None
        return self._cpu

    def cpu_tested(self) -> CpuTested:
        """The smoke suite over the classic CPU images, run once per session through `imagebuild test` (the
        record's tests, the report and per-image JUnit): every test that needs "these images passed the suite"
        reads this one run instead of running the suite again."""
        self._wait_classic(tested=True)
        if self._cpu_tested is None:
            self.cpu()
            self._test_classic()
        assert self._cpu_tested is not None
        return self._cpu_tested

    def start_buildkit(self) -> None:
        """Start the BuildKit build of images/cpu.yaml in the background (the classic build runs meanwhile on the
        other engine: the two overlap where one waits on the mirror, the disk or the network); `buildkit` waits for
        it. Its output goes to files, read when it ends."""
        if self._bk is not None or self._bk_running is not None:
            return
        tmp = self.folder / "bk"
        tmp.mkdir(parents=True, exist_ok=True)
        out, err = (tmp / "build.stdout").open("w"), (tmp / "build.stderr").open("w")
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **bk_env(tmp / "state")}
        every = {i.flavor for i in self._cpu_plan().plan.images} <= set(self.bk_flavors)
        argv = [sys.executable, "-m", "imagebuild", "build", *bk_args(self._cpu_plan(), tmp,
                                                                      () if every else self.bk_flavors)]
        proc = subprocess.Popen(argv,
                                stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True, cwd=ROOT, env=env)
        out.close()
        err.close()
        self._bk_running = (proc, tmp, time.monotonic())

    def buildkit(self, host: str) -> tuple:
        """images/cpu.yaml through the BuildKit backend on the modern engine, smoke-tested (`--test`): (result,
        docker client of that engine, its folder: report/, logs/, state/). Started in the background by
        `start_buildkit` when the session's tests ask for it (conftest.cpu_build), else built here."""
        if self._bk is None:
            import docker

            self.start_buildkit()
            assert self._bk_running is not None
            proc, tmp, t0 = self._bk_running
            try:
                proc.wait(timeout=max(1.0, 3600 - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            result = subprocess.CompletedProcess(proc.args, proc.returncode, (tmp / "build.stdout").read_text(),
                                                 (tmp / "build.stderr").read_text())
            self._bk_running = None
            self.made.append(Built(f"images/cpu.yaml ({', '.join(self.bk_flavors)}) + smoke", "buildkit",
                                   time.monotonic() - t0))
            self._bk = (result, docker.DockerClient(base_url=host, timeout=600), tmp)
        return self._bk

    def signal_when_built(self, path: str) -> None:
        """Create the file `path` once the builds started ahead (start_classic with its smoke run, start_buildkit) have
        ended, whichever way: scripts/run-tests.sh then starts the unit tests beside the image tests, on the cores the
        builds no longer use. At once when none was started; `cleanup` creates it too."""
        classic = self._classic
        bk = self._bk_running[0] if self._bk_running is not None else None

        def watch() -> None:
            if classic is not None:
                classic.join()
            if bk is not None:
                bk.wait()
            touch_file(path)

        threading.Thread(target=watch, name="builds ended", daemon=True).start()

    # -- small images FROM built ones -----------------------------------------------------------------------------

    def derive(self, name: str, parent: str, lines: str, files: dict[str, bytes] | None = None,
               client: object | None = None, platform: str | None = None) -> str:
        """An image FROM `parent` (a tag or image ID in `client`'s engine, the classic one by default) plus the
        Dockerfile `lines` and the context `files`; its tag. Built once per run for the same parent image ID, lines
        and files. `platform`: the parent's, when it is not the engine's own (linux/arm64 under QEMU)."""
        engine = client or self.client
        parent_id = engine.images.get(parent).id
        parts = [parent_id.encode(), lines.encode()] + [k.encode() + b"\0" + v for k, v in sorted((files or {}).items())]
        key = hashlib.sha256(b"\0\0".join(parts)).hexdigest()[:12]
        if key in self._derived:
            return self._derived[key][1]
        tag = f"{self.prefix}-derived-{name}:{key}"
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            for entry, data in {"Dockerfile": f"FROM {parent_id}\n{lines}".encode(), **(files or {})}.items():
                info = tarfile.TarInfo(entry)
                info.size, info.mtime = len(data), MTIME
                tar.addfile(info, io.BytesIO(data))
        context.seek(0)
        t0 = time.monotonic()
        # the SDK raises BuildError on an error in the stream
        engine.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
                            network_mode="host", platform=platform)
        self.made.append(Built(f"{name} FROM {parent}", "classic" if client is None else "buildkit",
                               time.monotonic() - t0))
        self._derived[key] = (engine, tag)
        return tag

    # -- the end of the run ---------------------------------------------------------------------------------------

    def summary(self) -> list[str]:
        matrix = [b for b in self.made if b.what.startswith("images/") and " smoke " not in b.what]
        smoke = [b for b in self.made if " smoke " in b.what or b.what.endswith("+ smoke")]
        derived = [b for b in self.made if not b.what.startswith("images/")]
        lines = [f"image provider: {len(matrix)} matrix builds, {len(smoke)} smoke runs of a matrix, "
                 f"{len(derived)} derived images"]
        lines += [f"  {b.engine:8} {b.seconds:6.0f} s  {b.what}" for b in self.made]
        return lines

    def cleanup(self) -> None:
        self._stopping = True
        if os.environ.get(BUILDS_ENDED):
            touch_file(os.environ[BUILDS_ENDED])
        if self._classic is not None and self._classic.is_alive():  # a session that ended before it did
            if self._classic_proc is not None and self._classic_proc.poll() is None:
                self._classic_proc.terminate()
            self._classic.join(timeout=120)
        if self._bk_running is not None:  # a session that ended (-x, Ctrl-C) before a test asked for it
            proc = self._bk_running[0]
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if os.environ.get("IMAGEBUILD_SMOKE_KEEP") == "1":
            return
        for engine, tag in reversed(list(self._derived.values())):
            try:
                engine.api.remove_image(tag, force=True)
            except Exception:
                pass
        if self._cpu is not None:
            for img in self._cpu.plan.images:
                for ref in (img.tag, *img.aliases):
                    try:
                        self.client.api.remove_image(ref, force=True)
                    except Exception:
                        pass
        if self._bk is not None:
            self._bk[1].close()
