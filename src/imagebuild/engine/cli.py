"""The engine's second door: the docker CLI, for what the SDK cannot do (buildx: BuildKit needs its gRPC session for
secrets, named contexts and cache export) and the few image calls a BuildKit build makes around it (tag, inspect,
load). Every `docker ...` process of the package starts here, so the binary, the environment it sees (DOCKER_HOST,
DOCKER_CONFIG: the same engine and buildx plugin the SDK and the user reach), the timeouts and the reading of its
error text are one place (tests/unit/test_import_rules.py: no other module starts a process naming docker). A
call that may change the engine's images (all but the few that only ask: READS) is told to changes.py, so the image
store does not answer from what it read before it (store.py).

    out = run(["version", "--format", "{{.Server.Version}}"], purpose="inspect")
    if not out.ok: say(out.reason)                          # the last stderr line, or why it did not run
    proc = start(["buildx", "build", ...], env=secret_env)   # a long-running build (caller streams its stderr)
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from imagebuild.engine.changes import changing, started

CliPurpose = Literal["inspect", "bootstrap", "load"]
# seconds a short call may take: an answer about the engine or an image; bringing a buildx builder up (a
# docker-container builder pulls its BuildKit image); `image load` of a multi-GB archive gets the build's own timeout
CLI_TIMEOUTS: dict[str, int] = {"inspect": 60, "bootstrap": 120, "load": 1800}
Process = subprocess.Popen[bytes]  # a started `docker ...` (start)
NOT_RUN, TIMED_OUT = 127, 124  # the status a call that could not start / did not answer reports (as a shell would)


def docker_binary() -> str:
    """The docker CLI: $IMAGEBUILD_DOCKER_CLI (tests point it at a fake), else `docker` on PATH."""
    return os.environ.get("IMAGEBUILD_DOCKER_CLI", "docker")


@dataclass(frozen=True)
class CliResult:
    """How one short call ended; never an exception (a missing binary or a timeout is a status like any other)."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def out(self) -> str:
        return self.stdout.strip()

    @property
    def reason(self) -> str:
        """Why it failed, in one line: docker's last stderr line (its `ERROR: ...`/`Error response ...`)."""
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        return lines[-1] if lines else f"docker {' '.join(self.argv[1:3])} exited with status {self.returncode}"


@dataclass
class _Prefetched:
    """A call started ahead of its caller, in a thread; `result()` waits for it."""

    done: threading.Event = field(default_factory=threading.Event)
    value: CliResult | None = None

    def result(self) -> CliResult:
        self.done.wait()
        assert self.value is not None
        return self.value


_prefetched: dict[tuple[str, ...], _Prefetched] = {}
_prefetch_lock = threading.Lock()


def _key(args: Sequence[str]) -> tuple[str, ...]:
    """A call is the same call only with the same binary and the same engine and plug-ins (DOCKER_HOST/CONFIG)."""
    return (docker_binary(), os.environ.get("DOCKER_HOST", ""), os.environ.get("DOCKER_CONFIG", ""), *args)


def prefetch(*calls: Sequence[str]) -> None:
    """Start these calls now, each in a thread, for a caller that will make them soon: their ~0.1-0.4 s each runs
    while the process imports and plans (the whole-process no-op). The next `run` of the same call (same binary,
    DOCKER_HOST and DOCKER_CONFIG) takes the answer, once; nothing else is cached."""
    for args in calls:
        key = _key(args)
        with _prefetch_lock:
            if key in _prefetched:
                continue
            pending = _prefetched[key] = _Prefetched()

        # the environment and binary of now, which the key names
        threading.Thread(target=_work, args=(args, pending, dict(os.environ), key[0]),
                         name=f"docker {' '.join(args[:2])}", daemon=True).start()


def _work(args: Sequence[str], pending: _Prefetched, env: dict[str, str], binary: str) -> None:
    try:
        pending.value = _run(args, CLI_TIMEOUTS["inspect"], env=env, binary=binary)
    finally:
        pending.done.set()


# the calls that only ask (no image changes): every other call counts as a change (changes.py)
READS = (("version",), ("info",), ("image", "inspect"), ("buildx", "version"), ("buildx", "ls"), ("buildx", "inspect"))


def reads_only(args: Sequence[str]) -> bool:
    """Does `docker ARGS` only ask? (`buildx inspect --bootstrap` starts a builder: a docker-container driver pulls
    its BuildKit image.)"""
    given = tuple(args)
    if given[:2] == ("buildx", "inspect") and "--bootstrap" in given:
        return False
    return any(given[:len(r)] == r for r in READS)


def run(args: Sequence[str], purpose: CliPurpose = "inspect", timeout: float | None = None) -> CliResult:
    """`docker ARGS` to its end; `timeout` overrides the purpose's seconds (a load gets the build's timeout)."""
    with _prefetch_lock:
        pending = _prefetched.pop(_key(args), None)
    if pending is not None:
        return pending.result()
    seconds = timeout if timeout is not None else CLI_TIMEOUTS[purpose]
    if reads_only(args):
        return _run(args, seconds)
    with changing():
        return _run(args, seconds)


def _run(args: Sequence[str], seconds: float, env: Mapping[str, str] | None = None,
         binary: str | None = None) -> CliResult:
    argv = (binary or docker_binary(), *args)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds, check=False,
                              stdin=subprocess.DEVNULL, env=None if env is None else dict(env))
    except OSError as exc:  # no such file, not executable
        return CliResult(argv, NOT_RUN, "", f"{argv[0]}: {exc.strerror or exc}")
    except subprocess.TimeoutExpired:
        return CliResult(argv, TIMED_OUT, "", f"docker {' '.join(args[:2])} did not answer within {seconds:g} s")
    return CliResult(argv, done.returncode, done.stdout, done.stderr)


def start(args: Sequence[str], env: Mapping[str, str] | None = None) -> Process:
    """`docker ARGS` as a process in its own session (a cancel terminates it, and only it) whose stderr the caller
    streams; `env` adds variables (build secrets passed by name, never on the command line). OSError when the
    binary does not run."""
    process = subprocess.Popen([docker_binary(), *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env={**os.environ, **(env or {})}, start_new_session=True)
    if not reads_only(args):
        started(process)  # a build tags or loads its image when it ends
    return process


ENGINE_VERSION = ("version", "--format", "{{.Server.Version}}")
BUILDX_VERSION = ("buildx", "version")


def engine_version() -> CliResult:
    """The engine's version as the CLI reaches it (DOCKER_HOST): `docker version --format {{.Server.Version}}`."""
    return run(ENGINE_VERSION)


def buildx_version() -> CliResult:
    """`docker buildx version`: whether the buildx plug-in runs (DOCKER_CONFIG's cli-plugins), and which."""
    return run(BUILDX_VERSION)


def prefetch_versions() -> None:
    """The engine's and buildx's versions, started now (what `--backend auto` asks: prefetch)."""
    prefetch(ENGINE_VERSION, BUILDX_VERSION)


def driver_status() -> str:
    """`docker info`'s DriverStatus as JSON text ("" when the engine does not answer)."""
    return run(["info", "--format", "{{json .DriverStatus}}"]).stdout


def image_id(ref: str) -> str | None:
    """The engine's ID of `ref` (with the containerd image store the manifest digest), None when it has none."""
    out = run(["image", "inspect", "--format", "{{.Id}}", ref])
    return out.out if out.ok and out.out.startswith("sha256:") else None


def diff_ids(ref: str) -> list[str] | None:
    """The layers (diff IDs, bottom first) of the engine's image `ref`; None when it has none or the answer is not a
    list of sha256 digests."""
    out = run(["image", "inspect", "--format", "{{json .RootFS.Layers}}", ref])
    try:
        layers = json.loads(out.out) if out.ok else None
    except ValueError:
        return None
    if not isinstance(layers, list) or not all(isinstance(x, str) and x.startswith("sha256:") for x in layers):
        return None
    return layers


def tag(image: str, ref: str) -> CliResult:
    return run(["image", "tag", image, ref])


def load(archive: str, timeout: float | None = None) -> CliResult:
    """`docker image load` of a docker archive into the engine's store."""
    return run(["image", "load", "--quiet", "--input", archive], purpose="load", timeout=timeout)
