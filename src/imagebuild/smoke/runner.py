"""Container lifecycle for the smoke suite: start the image the way its users run it, run the testinfra suite
against it (one pytest process per image, JUnit XML + JSON result), and always remove the container.

    tests = run_smoke("registry/x:2.9.1-cuda12.8-...-runtime", expectations={"torch": "2.9.1"})
    tests["passed"], tests["failed"], tests["skipped"], tests["checks"]  # -> ImageResult.tests
"""

from __future__ import annotations

import atexit
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path

SUITE_DIR = Path(__file__).resolve().parent / "suite"
PROBE_PATH = Path(__file__).resolve().parent / "probe"  # the in-image probe package (shipped as a zipapp)
DEFAULT_TIMEOUT = 1800.0
SHM_SIZE = "2g"
STACK_BYTES = 67108864
SMOKE_LABEL = "io.imagebuild.smoke"

_LIVE: dict[str, object] = {}  # container id -> container, removed at exit if still around
_LIVE_LOCK = threading.Lock()


class Interrupted(KeyboardInterrupt):
    """SIGTERM/SIGHUP while a smoke run holds a container (handled like Ctrl-C)."""


def safe_name(ref: str) -> str:
    """A tag/reference as a file/container name part: `reg:5000/a/b:2.9-x` -> `b-2.9-x`."""
    last = ref.rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", last).strip("-.")[:100] or "image"


def expectations_for(image) -> dict[str, str]:
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


def probe_zipapp() -> Path:
    """The in-image probe as one zipapp file, built (stdlib zipapp) once per process; the suite ships it."""
    from imagebuild.smoke.probe import zipapp_path

    return zipapp_path()


def docker_client(timeout: int = 600):
    """The engine connection every stage uses (`imagebuild.build.connect`): EngineUnavailable when none answers."""
    from imagebuild.build.engine import connect

    return connect(timeout=timeout)


def host_has_gpus(client) -> bool:
    """Does the engine's host have NVIDIA GPUs we can request?"""
    if os.environ.get("IMAGEBUILD_SMOKE_GPUS", "").lower() in ("0", "no", "none", "false"):
        return False
    try:
        runtimes = (client.info() or {}).get("Runtimes") or {}
    except Exception:
        runtimes = {}
    return "nvidia" in runtimes or os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None


def container_kwargs(image_ref: str, name: str, gpus: bool, ipc_host: bool = False) -> dict:
    """What `docker run` the seeds' users do: all GPUs, big /dev/shm (or host IPC), memlock/stack ulimits."""
    import docker

    kw = {
        "image": image_ref,
        "command": ["sleep", "infinity"],  # the image's entrypoint (tini) stays PID 1
        "name": name,
        "detach": True,
        "network_mode": "none",
        "ulimits": [docker.types.Ulimit(name="memlock", soft=-1, hard=-1),
                    docker.types.Ulimit(name="stack", soft=STACK_BYTES, hard=STACK_BYTES)],
        "labels": {SMOKE_LABEL: "1"},
    }
    if ipc_host:
        kw["ipc_mode"] = "host"
    else:
        kw["shm_size"] = SHM_SIZE
    if gpus:
        kw["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return kw


def _remove(container) -> str | None:
    cid = getattr(container, "id", None)
    try:
        container.remove(force=True, v=True)
        err = None
    except Exception as exc:
        if "No such container" in str(exc) or getattr(exc, "status_code", None) == 404:
            err = None
        else:
            err = str(exc)
    with _LIVE_LOCK:
        _LIVE.pop(cid, None)
    return err


@atexit.register
def _remove_leftovers() -> None:
    with _LIVE_LOCK:
        left = list(_LIVE.values())
    for c in left:
        _remove(c)


@contextmanager
def _signals_raise():
    """SIGTERM/SIGHUP raise Interrupted (main thread only) so `finally` blocks remove the container."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Interrupted(f"signal {signum}")

    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _kill_group(proc: subprocess.Popen) -> None:
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


def _start(client, kw: dict, extra: dict):
    """Create + start (so a container that fails to start is still ours to remove). An engine that may not raise
    memlock/stack limits (rootless, user namespaces) or has no GPU runtime gets a second try without them, noted in
    `extra["notes"]`."""
    import docker

    kw = dict(kw)
    kw.pop("detach", None)
    for _ in range(4):
        container = client.containers.create(**kw)
        with _LIVE_LOCK:
            _LIVE[container.id] = container
        try:
            container.start()
            return container, None
        except docker.errors.APIError as exc:
            _remove(container)
            msg = str(exc)
            notes = extra.setdefault("notes", [])
            if "rlimit" in msg and kw.get("ulimits"):
                dropped = kw["ulimits"][0]
                kw["ulimits"] = kw["ulimits"][1:]
                notes.append(f"engine refused ulimit {dropped['Name']}={dropped['Soft']}: ran without it")
                continue
            if kw.get("device_requests") and ("device driver" in msg or "nvidia" in msg.lower()):
                kw.pop("device_requests")
                extra["gpus_requested"] = False
                notes.append(f"GPU request failed ({msg[:200]}): ran without GPUs")
                continue
            return None, msg
    return None, "gave up after retries"


def _failed(reason: str, name: str = "container/start", **extra) -> dict:
    return {"passed": 0, "failed": 1, "skipped": 0,
            "checks": [{"name": name, "status": "failed", "reason": reason, "figures": {}}], **extra}


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
    client=None,
    name_prefix: str = "imagebuild-smoke",
    label: str | None = None,
    pytest_args: Iterable[str] = (),
    echo: Callable[[str], None] | None = None,
) -> dict:
    """Start `image_ref`, run the smoke suite in it, remove the container; return the ImageResult.tests dict.

    `flavor`: base|runtime|dev (default: the image's io.imagebuild.flavor label). `expectations`: KEY -> VALUE
    (the plan's pins; the image's labels are checked too). `gpus`: request all GPUs (default: when the host has
    them). Writes `<junit_dir>/<name>.xml` and `<result_dir>/<name>.json` (the checks plus the raw probe JSON).
    Never raises for a failing image: a container that does not start is one failed check. Ctrl-C/SIGTERM
    remove the container and propagate.
    """
    t0 = time.time()
    own_client = client is None
    client = client or docker_client()
    name = f"{name_prefix}-{safe_name(label or image_ref)}-{secrets.token_hex(3)}"[:120]
    extra: dict = {"image": image_ref, "container": name}
    try:
        try:
            image = client.images.get(image_ref)
        except Exception as exc:
            if "No such image" in str(exc) or type(exc).__name__ == "ImageNotFound":
                return _failed(f"image {image_ref} not found in the engine (build or pull it first)",
                               "image/present", **extra)
            raise
        labels = (image.attrs.get("Config") or {}).get("Labels") or {}
        flavor = flavor or labels.get("io.imagebuild.flavor")
        use_gpus = host_has_gpus(client) if gpus is None else gpus
        extra.update(flavor=flavor, gpus_requested=use_gpus)
        with _signals_raise():
            return _run_in_container(client, image_ref, name, flavor, expectations or {}, use_gpus, ipc_host,
                                     require_gpu, perf, junit_dir, result_dir, timeout, list(pytest_args),
                                     label or image_ref, echo, extra, t0)
    finally:
        if own_client:
            try:
                client.close()
            except Exception:
                pass


def _run_in_container(client, image_ref, name, flavor, expectations, use_gpus, ipc_host, require_gpu, perf,
                      junit_dir, result_dir, timeout, pytest_args, label, echo, extra, t0) -> dict:
    container = None
    proc = None
    tmp = None
    try:
        kw = container_kwargs(image_ref, name, use_gpus, ipc_host)
        container, err = _start(client, kw, extra)
        if container is None:
            return _failed(f"container did not start: {err}", **extra)
        container.reload()
        if container.status != "running":
            logs = container.logs(tail=20).decode(errors="replace").strip()
            state = (container.attrs.get("State") or {})
            return _failed(f"container exited right after start (exit {state.get('ExitCode')}, "
                           f"{state.get('Error') or logs[-800:] or 'no output'})", **extra)
        extra["start_seconds"] = round(time.time() - t0, 2)

        # absolute: pytest runs with cwd=SUITE_DIR, where a relative "reports/tests" would land elsewhere
        out_dir = Path(result_dir).resolve() if result_dir else None
        if out_dir is None:
            tmp = tempfile.mkdtemp(prefix="imagebuild-smoke-")
            out_dir = Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        base = safe_name(label)
        json_path = out_dir / f"{base}.json"
        raw_path = out_dir / f"{base}.pytest.json"
        log_path = out_dir / f"{base}.log"
        cmd = [sys.executable, "-m", "pytest", str(SUITE_DIR), f"--hosts=docker://{name}",
               "-c", str(SUITE_DIR / "pytest.ini"), "--rootdir", str(SUITE_DIR), "-p", "no:cacheprovider",
               "-q", "-rfs", "--smoke-json", str(raw_path)]
        if junit_dir:
            Path(junit_dir).mkdir(parents=True, exist_ok=True)
            junit_path = Path(junit_dir).resolve() / f"{base}.xml"
            cmd += ["--junitxml", str(junit_path), "-o", f"junit_suite_name={label}"]
            extra["junit"] = str(junit_path)
        if flavor:
            cmd += ["--flavor", flavor]
        for k, v in sorted(expectations.items()):
            cmd += ["--expect", f"{k}={v}"]
        if require_gpu:
            cmd.append("--require-gpu")
        if perf:
            cmd.append("--perf")
        cmd += ["--probe-timeout", str(int(max(60, timeout - 30))), "--probe-pyz", str(probe_zipapp())]
        cmd += pytest_args
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        if echo:
            echo(f"testing {label} in container {name}")
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                    cwd=str(SUITE_DIR))
            try:
                proc.wait(timeout=max(1.0, timeout - (time.time() - t0)))
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                return _failed(f"smoke suite timed out after {timeout:.0f} s (log: {log_path})", "suite/timeout",
                               **extra, log=str(log_path), seconds=round(time.time() - t0, 2))
        extra["log"] = str(log_path)
        if not raw_path.exists():
            tail = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-5:])
            return _failed(f"pytest exited {proc.returncode} without a result: {tail[-1500:]}", "suite/run", **extra)
        raw = json.loads(raw_path.read_text())
        raw_path.unlink()
        hosts = list((raw.get("hosts") or {}).values())
        host = hosts[0] if hosts else {}
        probe = host.get("probe") or {}
        tests = {
            "passed": raw["passed"], "failed": raw["failed"], "skipped": raw["skipped"],
            "checks": [{k: c[k] for k in ("name", "status", "reason", "figures")} for c in raw["checks"]],
            **extra,
            "flavor": host.get("flavor", flavor),
            "docker_exec": host.get("docker_exec"),
            "probe_seconds": (probe.get("probe") or {}).get("seconds"),
            "probe_wall_seconds": host.get("probe_wall_seconds"),
            "gpu": bool((probe.get("gpu") or {}).get("available")),
            "pytest_exit": proc.returncode,
        }
        if host.get("probe_error"):
            tests["probe_error"] = host["probe_error"]
        if not raw["checks"]:
            tests.update(failed=1, checks=[{"name": "suite/run", "status": "failed", "figures": {},
                                            "reason": f"pytest ran no checks (exit {proc.returncode}, log {log_path})"}])
        tests["seconds"] = round(time.time() - t0, 2)
        if result_dir:
            doc = dict(tests, probe=probe)
            json_path.write_text(json.dumps(doc, indent=2, default=str))
            tests["result_json"] = str(json_path)
        return tests
    finally:
        if proc is not None:
            _kill_group(proc)
        if container is not None:
            err = _remove(container)
            if err:
                extra["remove_error"] = err
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def test_images(images, results=None, *, only: str | None = None, **kwargs) -> list[tuple[object, dict]]:
    """Smoke-test planned images (ImagePlan list, parents first); fill `results[tag].tests` when given.

    Images whose build failed or was skipped (`ImageResult.status` not built/up-to-date) are not started.
    """
    out = []
    for image in images:
        if only and not matches(image, only):
            continue
        res = (results or {}).get(image.tag)
        if res is not None and res.status not in ("built", "up-to-date", "planned"):
            tests = {"passed": 0, "failed": 0, "skipped": 1, "image": image.tag,
                     "checks": [{"name": "image/present", "status": "skipped",
                                 "reason": f"image not tested: build status {res.status}", "figures": {}}]}
        else:
            ref = res.image_id if res is not None and res.image_id else image.tag
            tests = run_smoke(ref, image.flavor, expectations_for(image), label=image.tag, **kwargs)
        if res is not None:
            res.tests = tests
        out.append((image, tests))
    return out


test_images.__test__ = False  # not a pytest test despite the name


def matches(image, pattern: str) -> bool:
    """--only: glob or substring over id, tag, short tag, variant key, flavor (comma-separated alternatives)."""
    import fnmatch

    names = [image.id, image.tag, image.short_tag, image.variant.key, image.flavor]
    for pat in (p.strip() for p in pattern.split(",") if p.strip()):
        if any(fnmatch.fnmatchcase(n, pat) or pat in n for n in names):
            return True
    return False


def summary_table(rows: list[tuple[str, dict]]) -> str:
    """Rows of (image, tests) -> a plain table plus one line per failed check."""
    head = ("IMAGE", "FLAVOR", "PASS", "FAIL", "SKIP", "SECONDS", "EXECS", "GPU")
    table = [head]
    for ref, t in rows:
        table.append((ref, str(t.get("flavor") or "-"), str(t.get("passed", 0)), str(t.get("failed", 0)),
                      str(t.get("skipped", 0)), f"{t.get('seconds', 0) or 0:.1f}",
                      str(t.get("docker_exec") if t.get("docker_exec") is not None else "-"),
                      "yes" if t.get("gpu") else "no"))
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) if i > 1 else c.ljust(w)
                       for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip() for r in table]
    for ref, t in rows:
        for note in t.get("notes", []):
            lines.append(f"NOTE {ref}: {note}")
        for c in t.get("checks", []):
            if c["status"] == "failed":
                lines.append(f"FAIL {ref} {c['name']}: {c['reason']}")
    return "\n".join(lines)
