"""Container lifecycle for the smoke suite: start the image the way its users run it, run the testinfra suite
against it (one pytest process per image, JUnit XML + JSON result), and always remove the container.

    tests = run_smoke("registry/x:2.9.1-cuda12.8-...-runtime", expectations={"torch": "2.9.1"})
    tests["passed"], tests["failed"], tests["skipped"], tests["checks"]  # -> ImageResult.tests

The suite's JSON (the probe's, untyped) is parsed here into a smokeresult.SmokeResult; run_smoke returns its
to_json() (versioned), which the record, report and catalog read back with SmokeResult.from_json.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.compat import load as load_tables
from imagebuild.engine import ContainerSettings, connect, containers, host_has_gpus
from imagebuild.engine.connect import engine_machine
from imagebuild.engine.containers import Interrupted, signals_raise  # noqa: F401  (Interrupted: callers catch it here)
from imagebuild.engine.store import as_store
from imagebuild.files import open_fresh_text, write_text_atomic
from imagebuild.host.binfmt import emulation_note
from imagebuild.smoke import sides
from imagebuild.smokeresult import CheckResult, SmokeResult, SmokeResultError

if TYPE_CHECKING:
    from imagebuild.engine.store import EngineClient
    from imagebuild.models import ImagePlan

SUITE_DIR = Path(__file__).resolve().parent / "suite"
PROBE_PATH = Path(__file__).resolve().parent / "probe"  # the in-image probe package (shipped as a zipapp)
DEFAULT_TIMEOUT = 1800.0
SMOKE_LABEL = "io.imagebuild.smoke"
# The CPU QEMU emulates for a platform's containers (QEMU reads QEMU_CPU from the environment it starts with): GH200's
# Grace (Neoverse V2) has 128-bit SVE2 vectors. QEMU's default for aarch64 has wider ones, where torch 2.13 picks
# SVE256 kernels and Inductor's C++ compile of them crashed Debian 12's g++ under emulation (internal compiler error);
# with 128-bit vectors torch picks SVE128, as on a Grace node, and torch.compile passes.
EMULATED_CPU = {"linux/arm64": {"QEMU_CPU": "max,sve-default-vector-length=16"}}


def safe_name(ref: str) -> str:
    """A tag/reference as a file/container name part: `reg:5000/a/b:2.9-x` -> `b-2.9-x`."""
    last = ref.rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", last).strip("-.")[:100] or "image"


def expectations_for(image: ImagePlan) -> dict[str, str]:
    """An ImagePlan's resolved pins as suite expectations (`--expect KEY=VALUE`)."""
    v = image.variant
    out: dict[str, str] = {}
    for key, value in v.versions.as_dict().items():
        if value is not None:
            out[key] = str(value)
    if v.versions.cuda == "cpu":
        out.setdefault("cudnn", "")
        out.setdefault("nccl", "")
    out["flavor"] = image.flavor
    out["tf32"] = "true" if v.tf32 else "false"
    if v.gpu_archs:
        out["gpu_archs"] = ",".join(v.gpu_archs)
    for metric, floor in (v.perf_min or {}).items():
        out[f"perf_min.{metric}"] = str(floor)
    return out


def suite_version() -> str:
    """A digest of the probe and suite sources: a result is reused only with the same checks (record.testkeys)."""
    import hashlib

    h = hashlib.sha256()
    for root in (PROBE_PATH, SUITE_DIR):
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.suffix in (".py", ".ini", ".txt", ".json"):
                h.update(str(path.relative_to(root.parent)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def host_where(client: EngineClient) -> str:
    """Where a smoke run happens, as far as its outcome goes: "cpu" (no GPU requested: every GPU check skips) or the
    GPU model(s) nvidia-smi names."""
    if not host_has_gpus(client):
        return "cpu"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return "gpu"
    names = sorted({line.strip() for line in out.splitlines() if line.strip()})
    return "gpu:" + ",".join(names) if names else "gpu"


def probe_zipapp() -> Path:
    """The in-image probe as one zipapp file, built (stdlib zipapp) once per process; the suite ships it."""
    from imagebuild.smoke.probe import zipapp_path

    path: Path = zipapp_path()  # probe is not followed here (checked on its own): Any to this module
    return path


def docker_client() -> EngineClient:
    """The engine connection for smoke runs (`imagebuild.engine.connect`): EngineUnavailable when none answers."""
    return connect("smoke")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()


def _failed(reason: str, name: str = "container/start", **extra: Any) -> SmokeResult:
    """One failed check; `extra`: what run_smoke gathered so far, under SmokeResult's names."""
    return SmokeResult.failure(name, reason, **dict(extra, notes=tuple(extra.get("notes") or ())))


@dataclass
class SuiteRun:
    """What one smoke run asks of the suite (everything but the container)."""

    label: str  # the image's tag: names the JUnit suite and the result files
    flavor: str | None = None
    expectations: dict[str, str] = field(default_factory=dict)
    require_gpu: bool = False
    perf: bool = False
    junit_dir: Path | None = None
    result_dir: Path | None = None
    timeout: float = DEFAULT_TIMEOUT
    pytest_args: list[str] = field(default_factory=list)
    echo: Callable[[str], None] | None = None
    places: tuple[str, ...] | None = None  # the side containers to start (None: every one the flavor needs)
    sections: tuple[str, ...] | None = None  # only these probe sections (None: every one the flavor has)
    side_hosts: dict[str, str] = field(default_factory=dict)  # place -> its side container, once it runs
    side_errors: dict[str, str] = field(default_factory=dict)  # place -> why its side container does not run

    def command(self, container_name: str, raw_path: Path) -> list[str]:
        """The pytest command line that runs the suite against `container_name` over testinfra's docker backend."""
        cmd = [sys.executable, "-m", "pytest", str(SUITE_DIR), f"--hosts=docker://{container_name}",
               "-c", str(SUITE_DIR / "pytest.ini"), "--rootdir", str(SUITE_DIR), "-p", "no:cacheprovider",
               "-q", "-rfs", "--smoke-json", str(raw_path)]
        if self.junit_dir:
            cmd += ["--junitxml", str(self.junit_path), "-o", f"junit_suite_name={self.label}"]
        if self.flavor:
            cmd += ["--flavor", self.flavor]
        if self.sections is not None:
            cmd += ["--sections", ",".join(self.sections)]
        for k, v in sorted(self.expectations.items()):
            cmd += ["--expect", f"{k}={v}"]
        if self.require_gpu:
            cmd.append("--require-gpu")
        if self.perf:
            cmd.append("--perf")
        cmd += ["--probe-timeout", str(int(max(60, self.timeout - 30))), "--probe-pyz", str(probe_zipapp())]
        for place, name in sorted(self.side_hosts.items()):
            cmd += ["--side", f"{place}={name}"]
        for place, why in sorted(self.side_errors.items()):
            cmd += ["--side-error", f"{place}={why}"]
        return cmd + self.pytest_args

    @property
    def junit_path(self) -> Path:
        # absolute: pytest runs with cwd=SUITE_DIR, where a relative path would land elsewhere
        assert self.junit_dir is not None
        return Path(self.junit_dir).resolve() / f"{safe_name(self.label)}.xml"


def foreign_platform(client: EngineClient, info: dict[str, Any]) -> str | None:
    """`linux/arm64` when the image's architecture is not the engine's (its container runs under QEMU), else None.
    The engine's own platform is the compat platform table's row for its machine (`docker info` Architecture)."""
    arch = info.get("Architecture")
    if not arch:
        return None
    machine = engine_machine(client)
    if machine is None:
        return None
    native = load_tables().machine_platform(machine)
    if (native.rsplit("/", 1)[-1] if native else machine) == arch:
        return None
    return f"{info.get('Os') or 'linux'}/{arch}"


def run_smoke(
    image_ref: str,
    flavor: str | None = None,
    expectations: dict[str, str] | None = None,
    *,
    require_gpu: bool = False,
    perf: bool = False,
    junit_dir: str | Path | None = None,
    result_dir: str | Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    gpus: bool | None = None,
    ipc_host: bool = False,
    client: EngineClient | None = None,
    name_prefix: str = "imagebuild-smoke",
    label: str | None = None,
    pytest_args: Iterable[str] = (),
    echo: Callable[[str], None] | None = None,
    places: Iterable[str] | None = None,
    sections: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Start `image_ref`, run the smoke suite in it, remove the container; return the ImageResult.tests dict.

    `flavor`: base|runtime|dev (default: the image's io.imagebuild.flavor label). `expectations`: KEY -> VALUE
    (the plan's pins; the image's labels are checked too). `gpus`: request all GPUs (default: when the host has
    them). `places`: the side containers (smoke/sides.py: arbitrary-uid, hpc) to start next to the main one
    for their sections (default: every one the flavor needs); a place not started has its checks skipped.
    `sections`: only these probe sections and their checks (sides.sections_problem refuses a name the table has
    not), noted in the result: a partial run, never the image's whole verdict. Writes `<junit_dir>/<name>.xml` and `<result_dir>/<name>.json` (the checks plus the raw probe JSON).
    Never raises for a failing image: a container that does not start is one failed check. Ctrl-C/SIGTERM
    remove the container and propagate. The dict is smokeresult.SmokeResult.to_json() (see there).
    """
    t0 = time.time()
    if sections is not None:
        sections = tuple(sections)
        problem = sides.sections_problem(sections)
        if problem:
            raise ValueError(f"sections: {problem}")
    own_client = client is None
    client = client or docker_client()
    name = f"{name_prefix}-{safe_name(label or image_ref)}-{secrets.token_hex(3)}"[:120]
    extra: dict[str, Any] = {"image": image_ref, "container": name}
    try:
        info = as_store(client).inspect(image_ref)
        if info is None:
            return _failed(f"image {image_ref} not found in the engine (build or pull it first)",
                           "image/present", **extra).to_json()
        labels = (info.get("Config") or {}).get("Labels") or {}
        flavor = flavor or labels.get("io.imagebuild.flavor")
        use_gpus = host_has_gpus(client) if gpus is None else gpus
        extra.update(flavor=flavor, gpus_requested=use_gpus)
        platform = foreign_platform(client, info)
        emulation: dict[str, str] = {}
        if platform:  # the suite runs in the image's own platform, its binaries through QEMU: say so in the results
            row = load_tables().platforms.get(platform)  # its uname names the binfmt handler: qemu-<uname>
            qemu = emulation_note(row.uname if row else platform.rsplit("/", 1)[-1])
            notes = extra.setdefault("notes", [])
            notes.append(f"{platform} under emulation ({qemu}) on this engine: timings are not the platform's")
            extra["emulated"] = platform
            emulation = dict(EMULATED_CPU.get(platform, {}))
            if emulation:
                notes.append("emulated CPU: " + ", ".join(f"{k}={v}" for k, v in emulation.items()))
        settings = ContainerSettings(image=image_ref, name=name, gpus=use_gpus, ipc_host=ipc_host,
                                     labels={SMOKE_LABEL: "1"}, platform=platform, environment=emulation)
        only = None if sections is None else tuple(sections)
        if only is not None:
            extra.setdefault("notes", []).append(f"only the sections {', '.join(only)} (--sections): "
                                                 "not the whole suite")
        run = SuiteRun(label or image_ref, flavor, dict(expectations or {}), require_gpu, perf,
                       Path(junit_dir) if junit_dir else None, Path(result_dir) if result_dir else None,
                       timeout, list(pytest_args), echo, None if places is None else tuple(places), only)
        with signals_raise():
            return _run_in_container(client, settings, run, extra, t0).to_json()
    finally:
        if own_client:
            try:
                client.close()
            except Exception:
                pass


def _run_in_container(client: EngineClient, settings: ContainerSettings, run: SuiteRun, extra: dict[str, Any],
                      t0: float) -> SmokeResult:
    """Start the container (and its side containers), run the suite against them, always remove them."""
    started: list[Any] = []  # the SDK's containers (no stubs: Any), the main one first
    try:
        container, err = containers.start(client, settings.kwargs(), extra)
        if container is None:
            return _failed(f"container did not start: {err}", **extra)
        started.append(container)
        container.reload()
        if container.status != "running":
            logs = container.logs(tail=20).decode(errors="replace").strip()
            state = (container.attrs.get("State") or {})
            return _failed(f"container exited right after start (exit {state.get('ExitCode')}, "
                           f"{state.get('Error') or logs[-800:] or 'no output'})", **extra)
        for side in sides.for_flavor(run.flavor, run.sections):
            if run.places is not None and side.where not in run.places:
                continue
            side_container, name, why = sides.start_side(client, side, settings)
            if side_container is not None:
                started.append(side_container)
            if why is None:
                run.side_hosts[side.where] = name
                extra.setdefault("side_containers", {})[side.where] = name
            else:
                run.side_errors[side.where] = why
        extra["start_seconds"] = round(time.time() - t0, 2)
        result = _run_suite(settings.name, run, extra, t0)
    finally:
        for c in reversed(started):
            err = containers.remove(c)
            if err:
                extra["remove_error"] = err
    return result.replace(remove_error=extra["remove_error"]) if extra.get("remove_error") else result


def _run_suite(container_name: str, run: SuiteRun, extra: dict[str, Any], t0: float) -> SmokeResult:
    """One pytest process over the running container; its JSON result turned into a SmokeResult."""
    tmp = None
    proc = None
    try:
        out_dir = Path(run.result_dir).resolve() if run.result_dir else None
        if out_dir is None:
            tmp = tempfile.mkdtemp(prefix="imagebuild-smoke-")
            out_dir = Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        base = safe_name(run.label)
        raw_path = out_dir / f"{base}.pytest.json"
        log_path = out_dir / f"{base}.log"
        if run.junit_dir:
            Path(run.junit_dir).mkdir(parents=True, exist_ok=True)
            extra["junit"] = str(run.junit_path)
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        if run.echo:
            run.echo(f"testing {run.label} in container {container_name}")
        with open_fresh_text(log_path) as log:
            proc = subprocess.Popen(run.command(container_name, raw_path), stdout=log, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True, cwd=str(SUITE_DIR))
            try:
                proc.wait(timeout=max(1.0, run.timeout - (time.time() - t0)))
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                return _failed(f"smoke suite timed out after {run.timeout:.0f} s (log: {log_path})",
                               "suite/timeout", **extra, log=str(log_path), seconds=round(time.time() - t0, 2))
        extra["log"] = str(log_path)
        if not raw_path.exists():
            tail = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-5:])
            return _failed(f"pytest exited {proc.returncode} without a result: {tail[-1500:]}", "suite/run", **extra)
        raw = json.loads(raw_path.read_text())
        raw_path.unlink()
        tests, probe = _collect(raw, run, extra, proc.returncode, log_path)
        tests = tests.replace(seconds=round(time.time() - t0, 2))
        if run.result_dir:
            json_path = out_dir / f"{base}.json"
            tests = tests.replace(result_json=str(json_path))
            doc = {k: v for k, v in tests.to_json().items() if k != "result_json"}
            write_text_atomic(json_path, json.dumps(dict(doc, probe=probe), indent=2, default=str))
        return tests
    finally:
        if proc is not None:
            _kill_group(proc)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _collect(raw: dict[str, Any], run: SuiteRun, extra: dict[str, Any], exit_code: int,
             log_path: Path) -> tuple[SmokeResult, dict[str, Any]]:
    """The suite's `--smoke-json` document -> (its SmokeResult, the raw probe JSON). The probe's documents stay
    untyped (the probe imports nothing of imagebuild); what the result keeps of them is checked here, and a suite
    document that is not what this runner reads is one failed check saying what is wrong."""
    hosts = list((raw.get("hosts") or {}).values())
    host = hosts[0] if hosts else {}
    probe = host.get("probe") or {}
    header = probe.get("probe") or {}
    extra_probes = host.get("extra_probes") or {}  # per probe/table.py "where": root, arbitrary-uid, hpc
    doc = {
        "passed": raw.get("passed"), "failed": raw.get("failed"), "skipped": raw.get("skipped"),
        "checks": [{k: c.get(k) for k in ("name", "status", "reason", "figures")} for c in raw.get("checks") or []],
        **extra,
        "flavor": host.get("flavor", run.flavor),
        "docker_exec": host.get("docker_exec"),
        "probe_version": header.get("version"),
        "probe_seconds": header.get("seconds"),
        "probe_section_seconds": header.get("section_seconds"),
        "probe_wall_seconds": host.get("probe_wall_seconds"),
        "gpu": bool((probe.get("gpu") or {}).get("available")),
        "pytest_exit": exit_code,
        "extra_probe_seconds": {k: v.get("wall") for k, v in sorted(extra_probes.items())} or None,
        "probe_error": host.get("probe_error") or None,
    }
    if extra_probes:
        probe = dict(probe, extra_probes={k: v.get("doc") for k, v in sorted(extra_probes.items())})
    try:
        tests = SmokeResult.from_json(doc, f"the smoke suite's result ({log_path})")
    except SmokeResultError as exc:  # the suite's document is not what this runner reads: a failed check saying so
        tests = _failed(str(exc), "suite/result", **extra, pytest_exit=exit_code)
    if not tests.checks:
        tests = tests.replace(failed=1, checks=(CheckResult(
            "suite/run", "failed", f"pytest ran no checks (exit {exit_code}, log {log_path})", {}),))
    return tests, probe


def summary_table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """Rows of (image, tests: SmokeResult.to_json()) -> a plain table plus one line per failed check."""
    head = ("IMAGE", "FLAVOR", "PASS", "FAIL", "SKIP", "SECONDS", "EXECS", "GPU")
    table = [head]
    results = [(ref, SmokeResult.from_json(t, f"the smoke result of {ref}")) for ref, t in rows]
    for ref, r in results:
        table.append((ref, r.flavor or "-", str(r.passed), str(r.failed), str(r.skipped), f"{r.seconds or 0:.1f}",
                      str(r.docker_exec) if r.docker_exec is not None else "-", "yes" if r.gpu else "no"))
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) if i > 1 else c.ljust(w)
                       for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip() for r in table]
    for ref, r in results:
        lines += [f"NOTE {ref}: {note}" for note in r.notes]
        lines += [f"FAIL {ref} {c.name}: {c.reason}" for c in r.failures()]
    return "\n".join(lines)
