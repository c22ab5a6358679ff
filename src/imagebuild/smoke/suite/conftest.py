"""testinfra smoke suite: one in-image probe per place, its JSON asserted on by tests generated from the probe's
table of checks.

Run against any image someone already has:

    docker run -d --name x --shm-size 2g <image> sleep infinity
    pytest --hosts=docker://x src/imagebuild/smoke/suite [--expect torch=2.9.1 ...] [--require-gpu] [--perf]

Flavor (`io.imagebuild.flavor` label, `--flavor`, or `--expect flavor=`) selects the checks. The probe's table
(probe/table.py, read from the probe files this suite ships) names every check the probe reports, the lowest flavor
it applies to, where its probe runs and whether it needs a GPU: test_checks.py holds ONE test per row
(parametrized over the rows), and one per place failing when its probe reports a check no row names. A test that
asserts more about a check than its status claims it (`pytest.mark.asserts("tf32.accuracy")`) and is then that
check's one test. Tests of facts the probe gathers (versions, the runtime contract) name their section
(`pytestmark = pytest.mark.section("system")`). The places: the image's user (the main probe), root in the same
container (run first, before anything writes to /tmp), and the side containers the runner starts (an arbitrary UID,
the enroot/Apptainer way), named with `--side PLACE=CONTAINER` (or `--side-error PLACE=WHY` when one did not start).
Every probe runs once per place, the side containers' alongside the main one. `--sections a,b` narrows a run to those
sections' probes and tests (a place left without a section is not probed).
Expectations come from `--expect KEY=VALUE` and the image's `io.imagebuild.*` labels; a mismatch names the key, the
expected value (and where it came from) and the found value. This file does not import imagebuild.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol, cast

import pytest

if TYPE_CHECKING:  # testinfra has no stubs: Any to the checker
    from testinfra.backend.base import CommandResult
    from testinfra.host import Host

SUITE_DIR = Path(__file__).resolve().parent
PROBE_DIR = SUITE_DIR.parent / "probe"  # the probe package; shipped as one zipapp file
LABEL_PREFIX = "io.imagebuild."
PY_CANDIDATES = ("/opt/venv/bin/python", "python3", "python")
# what an imagebuild image promises beyond its labels (docs/ARCHITECTURE.md "Image layout")
IMAGEBUILD_DEFAULTS = {"user": "ml", "uid": "1000", "venv": "/opt/venv", "entrypoint": "tini",
                       "workdir": "/workspace"}
Json = dict[str, Any]  # a JSON object: the probe's document, a check, a container's inspect


class CheckFn(Protocol):
    """The `check` fixture."""

    def __call__(self, name: str | None = None) -> Json: ...


class ExpectValueFn(Protocol):
    """The `expect_value` fixture."""

    def __call__(self, key: str, found: Any, shown: Any = None, required: bool = False) -> Any: ...


FiguresFn = Callable[[Json], None]  # the `figures` fixture


def _load_probe() -> ModuleType:
    """The probe package from its files, as top-level `probe` (the name its modules import each other by)."""
    loaded = sys.modules.get("probe")
    if loaded is not None:  # already loaded (e.g. via imagebuild.smoke.probe in this process)
        if Path(getattr(loaded, "__file__", None) or ".").resolve().parent != PROBE_DIR:
            raise ImportError(f"a different top-level module 'probe' is loaded: {loaded!r}")
        return loaded
    spec = importlib.util.spec_from_file_location("probe", PROBE_DIR / "__init__.py",
                                                  submodule_search_locations=[str(PROBE_DIR)])
    assert spec is not None and spec.loader is not None  # a file location with a loader always has both
    mod = importlib.util.module_from_spec(spec)
    sys.modules["probe"] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop("probe", None)
        raise
    return mod


P = _load_probe()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("imagebuild smoke")
    g.addoption("--expect", action="append", default=[], metavar="KEY=VALUE",
                help="expected value (torch=2.9.1, cuda=12.8, os=ubuntu24.04, flavor=dev, user=ml, "
                     "perf_min.bf16_tflops=600 ...); wins over the io.imagebuild.* labels")
    g.addoption("--flavor", choices=P.FLAVORS, default=None,
                help="flavor of the image (default: io.imagebuild.flavor label, else runtime)")
    g.addoption("--require-gpu", action="store_true", default=False,
                help="GPU checks that cannot run fail instead of being skipped")
    g.addoption("--perf", action="store_true", default=False, help="run the performance probe (GPU)")
    g.addoption("--probe-python", default=None, help="python inside the image (default: /opt/venv/bin/python, "
                                                    "python3, python)")
    g.addoption("--probe-timeout", type=float, default=900.0, help="seconds for the in-image probe")
    g.addoption("--probe-pyz", default=None, metavar="FILE",
                help="the probe zipapp to ship (default: built from the probe package once per pytest process)")
    g.addoption("--smoke-json", default=None, metavar="FILE", help="write a JSON result (checks + probe) here")
    g.addoption("--sections", default=None, metavar="NAME[,NAME...]",
                help="only these probe sections and their tests (default: every section the flavor has; one of "
                     + ", ".join(P.SECTIONS) + ")")
    g.addoption("--side", action="append", default=[], metavar="PLACE=CONTAINER",
                help="a side container of the same image (PLACE: " + ", ".join(P.SIDE_CONTAINERS) + ") in which "
                     "the table's sections of that place run; the runner starts them (smoke/sides.py)")
    g.addoption("--side-error", action="append", default=[], metavar="PLACE=WHY",
                help="why the side container of PLACE is missing (it did not start): its checks fail with it")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "section(name): the probe section the test checks (probe/table.py: its "
                                       "lowest flavor, where its probe runs, opt-in)")
    config.addinivalue_line("markers", "asserts(name): the table's check this test is the one test of (it asserts "
                                       "more than the check's status); `{param}` takes the test's parameter")
    config.addinivalue_line("markers", "flavor(name): a test that applies from a higher flavor than its section's")
    config._ib_images = {}  # type: ignore[attr-defined]  # this suite's images, per testinfra host id
    config._ib_sides = {**{k: ("container", v) for k, v in _places(config, "side").items()},  # type: ignore[attr-defined]
                        **{k: ("error", v) for k, v in _places(config, "side_error").items()}}
    config._ib_only = _only_sections(config.getoption("sections", None))  # type: ignore[attr-defined]
    path = config.getoption("smoke_json", None)
    if path:
        config.pluginmanager.register(SmokeJson(config, path), "imagebuild-smoke-json")


def parse_expect(values: Iterable[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or ():
        if "=" not in item:
            raise pytest.UsageError(f"--expect {item!r}: want KEY=VALUE")
        k, v = item.split("=", 1)
        out[_norm_key(k)] = v.strip()
    return out


def _only_sections(value: str | None) -> frozenset[str] | None:
    """`--sections a,b` as a set (None: every section); an unknown name is refused with the choices."""
    if value is None:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    problem = P.sections_problem(names)
    if problem:
        raise pytest.UsageError(f"--sections {value!r}: {problem}")
    return frozenset(names)


def _selected(config: pytest.Config, section: str) -> bool:
    """Is `section` one this run covers (`--sections`, default every one)?"""
    only = config._ib_only  # type: ignore[attr-defined]  # set by pytest_configure
    return only is None or section in only


def _places(config: pytest.Config, option: str) -> dict[str, str]:
    """`--side PLACE=VALUE` options as {place: value}; a place the table has no side container for is refused."""
    out: dict[str, str] = {}
    for item in config.getoption(option, None) or ():
        place, sep, value = item.partition("=")
        if not sep or place not in P.SIDE_CONTAINERS:
            raise pytest.UsageError(f"--{option.replace('_', '-')} {item!r}: want PLACE=VALUE, PLACE one of "
                                    f"{', '.join(P.SIDE_CONTAINERS)}")
        out[place] = value
    return out


def _norm_key(k: str) -> str:
    k = k.strip()
    if k.startswith(LABEL_PREFIX):
        k = k[len(LABEL_PREFIX):]
    return k.replace("-", "_").lower()


# ---------------------------------------------------------------------------------------------------------------
# one image under test (per testinfra host)
# ---------------------------------------------------------------------------------------------------------------


class ImageUnderTest:
    def __init__(self, host: Host, config: pytest.Config) -> None:
        self.host = host
        self.config = config
        self.id: str = host.backend.get_pytest_id()
        self.inspect = _inspect(host)
        cfg = (self.inspect or {}).get("Config") or {}
        self.labels: dict[str, str] = {k: v for k, v in (cfg.get("Labels") or {}).items()}
        self.is_imagebuild = any(k.startswith(LABEL_PREFIX) for k in self.labels)
        self.options = parse_expect(config.getoption("expect"))
        self.require_gpu: bool = config.getoption("require_gpu")
        self.perf: bool = config.getoption("perf")
        flavor = config.getoption("flavor") or self.options.get("flavor") or self.labels.get(LABEL_PREFIX + "flavor")
        self.flavor_source = ("--flavor" if config.getoption("flavor") else "--expect" if self.options.get("flavor")
                              else "label" if flavor else "assumed")
        self.flavor = flavor if flavor in P.FLAVORS else "runtime"
        self.execs = 0
        self._lock = threading.Lock()  # the side containers' probes run in threads
        self._started = False
        self._probe: Json | None = None
        self.probe_error: str | None = None
        self.probe_wall: float | None = None
        self.probe_stderr = ""
        self.extra: dict[str, Json] = {}  # P.ROOT and each side container -> extra_probe's dict

    # expectations -----------------------------------------------------------------------------------------------
    def expected(self, key: str) -> list[tuple[str, str]]:
        """[(source, value)]: from --expect and from the label (both checked); else imagebuild defaults."""
        key = _norm_key(key)
        out: list[tuple[str, str]] = []
        if key in self.options:
            out.append((f"--expect {key}", self.options[key]))
        for lk, lv in self.labels.items():
            if lk.startswith(LABEL_PREFIX) and _norm_key(lk) == key:
                out.append((f"label {lk}", lv))
        if not out and self.is_imagebuild and key in IMAGEBUILD_DEFAULTS:
            out.append(("imagebuild image layout", IMAGEBUILD_DEFAULTS[key]))
        if not out and key in ("cudnn", "nccl") and self.cpu_variant():
            out.append(("implied by cuda=cpu", ""))
        return out

    def expected_value(self, key: str) -> str | None:
        exps = self.expected(key)
        return exps[0][1] if exps else None

    def cpu_variant(self) -> bool:
        exps = self.expected("cuda")  # --expect first, then the label
        if exps:
            return str(exps[0][1]).lower() == "cpu"
        if self._probe is not None:
            return bool(self.probe.get("versions", {}).get("torch")) and not self.probe["versions"].get("cuda")
        return False

    def perf_min(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, value in list(self.options.items()) + [(_norm_key(k), v) for k, v in self.labels.items()
                                                        if k.startswith(LABEL_PREFIX)]:
            if key.startswith("perf_min.") or key.startswith("perf_min_"):
                metric = key[len("perf_min."):]
                try:
                    out.setdefault(metric, float(value))
                except ValueError:
                    pass
        return out

    # probe ------------------------------------------------------------------------------------------------------
    def sections(self, where: str = P.IMAGE_USER) -> tuple[str, ...]:
        """The sections the probe run `where` covers for this image's flavor (the table decides)."""
        sections: tuple[str, ...] = P.sections_for(self.flavor, where, opt_in=self.perf)
        return tuple(s for s in sections if _selected(self.config, s))

    def run(self, command: str) -> CommandResult:
        with self._lock:
            self.execs += 1
        return self.host.run(command)

    @property
    def probe(self) -> Json:
        """The main probe's document (the image's user); a test fails when that probe did not run."""
        self._run_probes()
        if self.probe_error:
            pytest.fail(f"in-image probe did not run: {self.probe_error}", pytrace=False)
        return cast(Json, self._probe)  # set whenever probe_error is not

    def places(self) -> list[str]:
        """The places whose probe this image needs: each with a section for its flavor (and, for a side container,
        one the runner started or said why not)."""
        sides = self.config._ib_sides  # type: ignore[attr-defined]  # set by pytest_configure
        return [w for w in P.WHERE if self.sections(w) and (w not in P.SIDE_CONTAINERS or w in sides)]

    def _run_probes(self) -> None:
        """Every probe once: the side containers' in threads of their own, alongside root's and then the main probe
        in this one. Root's probe comes first in the main container: hygiene judges the container as the image left
        it, before the main probe's sections (compile caches, child probes) write to /tmp."""
        if self._started:
            return
        self._started = True
        threads = [threading.Thread(target=self.extra_probe, args=(w,), daemon=True)
                   for w in self.places() if w in P.SIDE_CONTAINERS]
        for t in threads:
            t.start()
        if self.sections(P.ROOT):
            self.extra_probe(P.ROOT)
        self._probe, self.probe_error, self.probe_wall, self.probe_stderr = self._exec_probe(self.host,
                                                                                              self.sections())
        for t in threads:
            t.join()

    def _exec_probe(self, host: Host, sections: Iterable[str]) -> tuple[Json | None, str | None, float | None, str]:
        """ONE docker exec on `host`: write the zipapp (fed on the exec's stdin), run it with `sections`, clean up.
        -> (doc or None, error or None, wall seconds, stderr tail)."""
        pyz = Path(self.config.getoption("probe_pyz") or P.zipapp_path()).read_bytes()
        cands = [self.config.getoption("probe_python")] if self.config.getoption("probe_python") else PY_CANDIDATES
        timeout = self.config.getoption("probe_timeout")
        fed = getattr(host.backend, "NAME", "") == "docker"
        # a docker host reads the zipapp from stdin; any other testinfra host gets it in base64 on the command line,
        # which holds at most 128 KiB in one argument (Linux's MAX_ARG_STRLEN: the probe's base64 passed that)
        write = ("import sys; open(sys.argv[1],'wb').write(sys.stdin.buffer.read())" if fed else
                 "import base64,sys; open(sys.argv[1],'wb').write(base64.b64decode(sys.argv[2]))")
        script = (
            'PY=""; for c in ' + " ".join(cands) + '; do if command -v "$c" >/dev/null 2>&1; then PY="$c"; '
            'break; fi; done; [ -n "$PY" ] || { echo "no python found in the image (' + " ".join(cands)
            + ')" >&2; exit 127; }; '
            # a temp dir of its own; where /tmp refuses this user (what uid.tmp_writable then reports) HOME's, where
            # HOME refuses it too (uid.home_writable's finding) /dev/shm's: the probe runs and reports both
            'D=$(mktemp -d 2>/dev/null || mktemp -d "${HOME:-/nonexistent}/.ibprobe.XXXXXX" 2>/dev/null '
            '|| mktemp -d /dev/shm/ibprobe.XXXXXX 2>/dev/null '
            '|| { mkdir -p /tmp/ibprobe.$$ && echo /tmp/ibprobe.$$; }); '
            f'"$PY" -c "{write}" "$D/probe.pyz" ' + ("" if fed else base64.b64encode(pyz).decode()) + ' && '
            '"$PY" "$D/probe.pyz" --sections ' + ",".join(sections)
            + f' --timeout {timeout:.0f} </dev/null; rc=$?; rm -rf "$D"; exit $rc'
        )
        t0 = time.time()
        with self._lock:
            self.execs += 1
        try:
            res = _docker_exec_fed(host.backend, script, pyz) if fed else host.run(script)
        except Exception as exc:  # docker CLI missing, container gone ...
            return None, f"{type(exc).__name__}: {exc}", None, ""
        wall = round(time.time() - t0, 2)
        doc: Json | None = None
        out = res.stdout.strip()
        try:
            doc = json.loads(out)
        except ValueError:
            for line in reversed(out.splitlines()):
                if line.startswith("{"):
                    try:
                        doc = json.loads(line)
                        break
                    except ValueError:
                        continue
        if doc is None:
            tail = " | ".join(ln for ln in res.stderr.strip().splitlines()[-4:])
            return None, f"exit {res.rc}, no JSON on stdout: {tail[-1500:]}", wall, res.stderr[-4000:]
        return doc, None, wall, res.stderr[-4000:]

    def extra_probe(self, where: str) -> Json:
        """The probe of the sections that run apart (run once per `where`): P.ROOT as root in this container, each of
        P.SIDE_CONTAINERS in the side container the runner started (`--side PLACE=NAME`) or said why not
        (`--side-error PLACE=WHY`). -> {"doc", "error", "wall", "where" (who ran it), "user", "stderr"}."""
        if where not in self.extra:
            import testinfra

            label: str | None
            host: Host | None
            error: str | None
            user: str | None
            label, host, error, user = None, None, None, None
            if where in P.SIDE_CONTAINERS:  # a container of its own, started by the runner: its name, or why not
                kind, value = self.config._ib_sides.get(where, ("error", f"no {where} container"))  # type: ignore[attr-defined]
                if kind == "error":
                    error = value
                else:
                    label, host = value, testinfra.get_host(f"docker://{value}")
                    user = ((_inspect_container(value) or {}).get("Config") or {}).get("User") or None
            elif getattr(self.host.backend, "NAME", "") == "docker":
                label = f"root@{self.host.backend.name}"
                host, user = testinfra.get_host(f"docker://{label}"), "root"
            else:
                label, host = "the test host's user", self.host
            doc: Json | None
            wall: float | None
            doc, wall, stderr = None, None, ""
            if host is not None:
                doc, error, wall, stderr = self._exec_probe(host, self.sections(where))
            self.extra[where] = {"doc": doc, "error": error, "wall": wall, "where": label, "user": user,
                                 "stderr": stderr if error else ""}
        return self.extra[where]

    def place_doc(self, where: str, not_run: Callable[..., Any] = pytest.fail) -> tuple[Json, str | None]:
        """(the document of the probe run `where`, who ran it); skips where no side container is wired (a plain
        pytest run by hand); `not_run(reason)` (a failure) where that probe did not run."""
        sides = self.config._ib_sides  # type: ignore[attr-defined]
        if where in P.SIDE_CONTAINERS and where not in sides:
            pytest.skip(f"no {where} container to test in (the runner starts one as smoke/sides.py says; by hand: "
                        f"start it so and pass --side {where}=NAME)")
        self._run_probes()
        if where == P.IMAGE_USER:
            if self.probe_error:
                not_run(f"in-image probe did not run: {self.probe_error}", pytrace=False)
            return cast(Json, self._probe), None
        res = self.extra_probe(where)
        if res["error"]:
            not_run(f"{where} probe ({res['where'] or 'not run'}): {res['error']}", pytrace=False)
        return res["doc"], res["where"]

    def check(self, name: str) -> Json | None:
        """The main probe's check `name`, or None when it reported none."""
        c: Json
        for c in self.probe.get("checks", []):
            if c["name"] == name:
                return c
        return None

    def summary(self) -> Json:
        return {"flavor": self.flavor, "flavor_source": self.flavor_source, "docker_exec": self.execs,
                "probe_wall_seconds": self.probe_wall, "probe_error": self.probe_error,
                "probe": self._probe, "probe_stderr_tail": self.probe_stderr[-2000:] if self.probe_error else "",
                "extra_probes": self.extra,
                "expectations": {k: v for k, v in self.options.items()},
                "labels": {k: v for k, v in self.labels.items() if k.startswith(LABEL_PREFIX)}}


def _inspect(host: Host) -> Json | None:
    """Container config (labels, user, entrypoint) for the docker backend: no exec needed."""
    backend = host.backend
    if getattr(backend, "NAME", "") != "docker":
        return None
    return _inspect_container(backend.name)


def _inspect_container(name: str) -> Json | None:
    """`docker inspect` of the container `name` (the SDK, else the docker CLI), or None."""
    try:
        import docker

        client = docker.from_env()
        try:
            info: Json = client.api.inspect_container(name)
            return info
        finally:
            client.close()
    except Exception:
        pass
    exe = shutil.which("docker")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "inspect", name], capture_output=True, text=True, timeout=60)
        data = json.loads(out.stdout)
        return data[0] if data else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _docker_exec_fed(backend: Any, script: str, data: bytes) -> Any:
    """`script` in the container of a testinfra docker host (as its user) with `data` on stdin: `docker exec -i`,
    what testinfra's own run does, plus the stdin it cannot give. -> .rc, .stdout, .stderr as testinfra's result."""
    user = ["-u", backend.user] if backend.user is not None else []
    out = subprocess.run(["docker", "exec", "-i", *user, backend.name, "/bin/sh", "-c", script], input=data,
                         capture_output=True, check=False)
    return SimpleNamespace(rc=out.returncode, stdout=out.stdout.decode(errors="replace"),
                           stderr=out.stderr.decode(errors="replace"))


def image_for(config: pytest.Config, host: Host) -> ImageUnderTest:
    # config._ib_images: set by pytest_configure (not an attribute pytest.Config declares)
    key = host.backend.get_pytest_id()
    if key not in config._ib_images:  # type: ignore[attr-defined]
        config._ib_images[key] = ImageUnderTest(host, config)  # type: ignore[attr-defined]
    images: dict[str, ImageUnderTest] = config._ib_images  # type: ignore[attr-defined]
    return images[key]


def item_section(item: pytest.Item) -> Any:  # probe.table.Section (the probe is loaded from its files)
    """The probe table's row of the section a suite test checks (its file's `section` marker)."""
    marker = item.get_closest_marker("section")
    if marker is None or not marker.args:
        raise pytest.UsageError(f"{item.nodeid}: no pytest.mark.section(NAME) (one of {', '.join(P.SECTIONS)})")
    try:
        return P.section(marker.args[0])
    except KeyError as exc:
        raise pytest.UsageError(f"{item.nodeid}: {exc.args[0]}") from None


def _params(item: pytest.Item) -> dict[str, Any]:
    """A test's parameters but testinfra's host."""
    callspec = getattr(item, "callspec", None)
    return {k: v for k, v in (callspec.params.items() if callspec is not None else ()) if k != "_testinfra_host"}


def item_check(item: pytest.Item) -> Any:  # probe.table.Check, or None
    """The table's check a test is the one test of: the generated test's row, or the row a hand-written test claims
    with `pytest.mark.asserts(NAME)` (`{param}` in NAME filled from its parameters); None for other tests."""
    params = _params(item)
    if "check_row" in params:
        return params["check_row"]
    marker = item.get_closest_marker("asserts")
    if marker is None:
        return None
    try:
        name = str(marker.args[0]).format(**params)
    except (IndexError, KeyError) as exc:
        raise pytest.UsageError(f"{item.nodeid}: pytest.mark.asserts wants NAME (its {{param}} a parameter of the "
                                f"test): {exc}") from None
    row = P.check_row(name)
    if row is None:
        raise pytest.UsageError(f"{item.nodeid}: asserts {name!r}, which no row of probe/table.py names")
    return row


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """test_checks.py's tests: one per row of the table's checks, one per place a probe runs."""
    if "check_row" in metafunc.fixturenames:
        metafunc.parametrize("check_row", P.CHECKS, ids=[c.name for c in P.CHECKS])
    if "place" in metafunc.fixturenames:
        metafunc.parametrize("place", P.WHERE)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    keep: list[pytest.Item]
    drop: list[pytest.Item]
    keep, drop = [], []
    claimed: dict[tuple[str, str], str] = {}  # (host, check) -> the hand-written test that asserts it
    for item in items:
        params = _params(item)
        if "check_row" not in params and item_check(item) is not None:
            key = (_host_id(item), item_check(item).name)
            if key in claimed:
                raise pytest.UsageError(f"{item.nodeid} and {claimed[key]} both assert {key[1]}: one test a check")
            claimed[key] = item.nodeid
    for item in items:
        host = getattr(item, "callspec", None) and item.callspec.params.get("_testinfra_host")  # type: ignore[attr-defined]  # pytest.Function's
        flavor = image_for(config, host).flavor if host is not None else None
        check = item_check(item)
        if check is not None:
            if "check_row" in _params(item) and (_host_id(item), check.name) in claimed:
                continue  # its hand-written test is its one test (not a deselection: the check is tested)
            if (check.opt_in and not config.getoption(check.section)) or not _selected(config, check.section) or (
                    flavor is not None and not P.applies(check, flavor)):
                drop.append(item)
            else:
                keep.append(item)
            continue
        place = _params(item).get("place")
        if place is not None:  # one test per place: only where a probe runs for this flavor
            if flavor is not None and not image_for(config, host).sections(place):
                drop.append(item)
            else:
                keep.append(item)
            continue
        row = item_section(item)
        if (row.opt_in and not config.getoption(row.name)) or not _selected(config, row.name):
            drop.append(item)
            continue
        if flavor is not None and not P.applies(row, flavor):
            drop.append(item)
            continue
        # a test of a section may apply from a higher flavor than its section (the torch family's versions in the
        # base-flavor `versions` section): `pytest.mark.flavor(NAME)` on that test
        marker = item.get_closest_marker("flavor")
        if flavor is not None and marker is not None and not P.applies(
                P.Section(row.name, row.module, marker.args[0]), flavor):
            drop.append(item)
            continue
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def _host_id(item: pytest.Item) -> str:
    host = getattr(item, "callspec", None) and item.callspec.params.get("_testinfra_host")  # type: ignore[attr-defined]  # pytest.Function's
    return str(host.backend.get_pytest_id()) if host is not None else ""


# ---------------------------------------------------------------------------------------------------------------
# fixtures used by the test files
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke(host: Host, request: pytest.FixtureRequest) -> ImageUnderTest:
    return image_for(request.config, host)


@pytest.fixture
def probe(smoke: ImageUnderTest) -> Json:
    return smoke.probe


@pytest.fixture(scope="session")
def probe_lib() -> ModuleType:
    """The probe module (pure parsing/comparison helpers)."""
    return P


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> FiguresFn:
    """figures(dict): attach figures to this check (JSON result and JUnit property)."""

    def add(fig: Json) -> None:
        if fig:
            request.node.user_properties.append(("figures", json.dumps(fig, default=str, sort_keys=True)))

    return add


@pytest.fixture
def check(smoke: ImageUnderTest, figures: FiguresFn, request: pytest.FixtureRequest) -> CheckFn:
    """check(): turn this test's check (its table row: generated, or claimed with pytest.mark.asserts) into its
    outcome, from the probe of the row's place; a skip for want of a GPU fails a GPU row under --require-gpu."""

    def run(name: str | None = None) -> Json:
        row = item_check(request.node)
        if row is None or (name is not None and name != row.name):
            pytest.fail(f"{request.node.nodeid} asks for check {name!r} but is the test of "
                        f"{row.name if row is not None else 'no check'} (pytest.mark.asserts)", pytrace=False)
        doc, ran_as = smoke.place_doc(row.where)
        c: Json | None = next((c for c in doc.get("checks", []) if c["name"] == row.name), None)
        if c is None:
            pytest.fail(f"the {row.where} probe reported no '{row.name}' check (sections: "
                        f"{','.join(doc.get('probe', {}).get('sections', []))})", pytrace=False)
        figures(dict(c.get("figures") or {}, probe_ran_as=ran_as) if ran_as else (c.get("figures") or {}))
        if c["status"] == "passed":
            if c.get("reason"):
                request.node.user_properties.append(("note", c["reason"]))
            return c
        if c["status"] == "failed":
            pytest.fail(f"{row.name}: {c['reason']}", pytrace=False)
        reason = c["reason"]
        if row.gpu and smoke.require_gpu and reason.startswith(P.NO_GPU) and not smoke.cpu_variant():
            pytest.fail(f"{reason} (--require-gpu)", pytrace=False)
        pytest.skip(reason)

    return run


@pytest.fixture
def expect_value(smoke: ImageUnderTest, figures: FiguresFn, request: pytest.FixtureRequest) -> ExpectValueFn:
    """expect_value(key, found, shown=None): compare with every expectation; skip when there is none."""

    def run(key: str, found: Any, shown: Any = None, required: bool = False) -> Any:
        exps = smoke.expected(key)
        figures({"key": key, "found": found, "expected": {src: v for src, v in exps}})
        if not exps:
            if required:
                pytest.fail(f"{key}: no expectation (no io.imagebuild.{key.replace('_', '-')} label, no --expect "
                            f"{key}=)", pytrace=False)
            pytest.skip(f"no expectation for {key} (no io.imagebuild.{key.replace('_', '-')} label, "
                        f"no --expect {key}=); found {shown or found}")
        shown = shown if shown is not None else ("not installed" if found in (None, "") else found)
        bad = [f"{key}: expected {v if str(v).strip() else 'absent'} ({src}), found {shown}"
               for src, v in exps if not P.versions_match(key, v, found)]
        if bad:
            pytest.fail("; ".join(bad), pytrace=False)
        request.node.user_properties.append(("note", f"{key} {shown} matches " + ", ".join(
            f"{v if str(v).strip() else 'absent'} ({src})" for src, v in exps)))
        return found

    return run


# ---------------------------------------------------------------------------------------------------------------
# JSON result (`--smoke-json FILE`): what the runner turns into ImageResult.tests
# ---------------------------------------------------------------------------------------------------------------


def check_name(item: pytest.Item) -> str:
    """A result's name: a table check's own name (`amp.cpu_bf16`) for its one test, else `file/test[params]`."""
    row = item_check(item)
    if row is not None:
        return str(row.name)
    module = Path(str(item.fspath)).stem
    module = module[5:] if module.startswith("test_") else module
    func: str = (item.originalname  # type: ignore[attr-defined]  # pytest.Function's
                 if getattr(item, "originalname", None) else item.name.split("[")[0])
    func = func[5:] if func.startswith("test_") else func
    params = []
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        for k, v in callspec.params.items():
            if k != "_testinfra_host":
                params.append(str(v))
    return f"{module}/{func}" + (f"[{'-'.join(params)}]" if params else "")


class SmokeJson:
    def __init__(self, config: pytest.Config, path: str) -> None:
        self.config = config
        self.path = Path(path)
        self.rows: dict[str, Json] = {}
        self.t0 = time.time()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield  # pluggy's Result
        rep: pytest.TestReport = outcome.get_result()
        host = getattr(item, "callspec", None) and item.callspec.params.get("_testinfra_host")  # type: ignore[attr-defined]  # pytest.Function's
        row = self.rows.setdefault(item.nodeid, {
            "name": check_name(item), "status": "passed", "reason": "", "figures": {}, "seconds": 0.0,
            "host": host.backend.get_pytest_id() if host is not None else None})
        row["seconds"] = round(row["seconds"] + rep.duration, 3)
        if rep.when == "call" or rep.failed or rep.skipped:
            for k, v in item.user_properties:
                if k == "figures":
                    try:
                        row["figures"].update(json.loads(cast(str, v)))  # `figures` wrote a JSON str; else TypeError below
                    except (TypeError, ValueError):
                        pass
                elif k == "note" and row["status"] == "passed" and rep.passed:
                    row["reason"] = str(v)
        if rep.failed and row["status"] != "failed":
            row["status"] = "failed"
            row["reason"] = _reason(rep)
            if rep.when != "call":
                row["reason"] = f"{rep.when}: {row['reason']}"
        elif rep.skipped and row["status"] == "passed":
            row["status"] = "skipped"
            row["reason"] = _reason(rep)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int | pytest.ExitCode) -> None:
        checks = list(self.rows.values())
        doc = {
            "passed": sum(1 for c in checks if c["status"] == "passed"),
            "failed": sum(1 for c in checks if c["status"] == "failed"),
            "skipped": sum(1 for c in checks if c["status"] == "skipped"),
            "checks": checks,
            "seconds": round(time.time() - self.t0, 2),
            "hosts": {k: v.summary() for k, v in self.config._ib_images.items()},  # type: ignore[attr-defined]
            "pytest_exit": int(exitstatus),
            "python": sys.version.split()[0],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(doc, indent=2, default=str))


def _reason(rep: pytest.TestReport) -> str:
    lr = rep.longrepr
    if lr is None:
        return ""
    if isinstance(lr, tuple) and len(lr) == 3:
        text = str(lr[2])
        return text[len("Skipped: "):] if text.startswith("Skipped: ") else text
    crash = getattr(lr, "reprcrash", None)
    if crash is not None and crash.message:
        msg: str = crash.message
        for prefix in ("Failed: ", "AssertionError: "):
            if msg.startswith(prefix):
                msg = msg[len(prefix):]
        return msg[:2000]
    return str(lr).strip().splitlines()[-1][:2000] if str(lr).strip() else ""
