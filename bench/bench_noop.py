"""No-op speed, side by side (a figure, not a test): a whole-process `imagebuild build` of an already built matrix
vs a warm BuildKit no-op of the same rendered Dockerfiles through Debian's docker CLI vs `imagebuild --help`.

    PYTHONPATH=src python bench/bench_noop.py [--matrix images/cpu.yaml] [--runs 7] [--markdown bench/noop-cpu.md]
        [--wheelhouse DIR] [--ca-cert PEM] [--torch-index-url none] [--only PATTERN] [--quick]
        [--baseline-src OTHER/src]

Needs an engine (DOCKER_HOST or the default socket). First, once and not timed: `imagebuild build` of the matrix
(a real build when the engine does not hold it yet), the Dockerfiles and contexts imagebuild builds written to
folders, and one BuildKit build of each (`DOCKER_BUILDKIT=1 /usr/bin/docker build`, parents first) to warm
BuildKit's own cache, which the classic builder's layers do not fill. BuildKit v0.8 (Docker 20.10) refuses image IDs
in FROM, so every BuildKit image is tagged and its children name the parent by that tag; the base names the OS image
by the tag imagebuild gave it. Then, RUNS times, in turn (A B C, A B C, ...):

  A  `imagebuild build` with the same arguments: every image up to date (checked: the report says so)
  N  the same into a new report folder (every fresh CI runner: the state folder kept, the reports not), its own
     folder each run (the images' SBOMs: from what the state keeps per image ID, pipeline/supply.py)
  N' with --baseline-src: N by another source tree (the code before a change) on the same state and engine
  B  the same `docker build`s again, one after the other, as a user would (checked: the same image IDs)
  C  `imagebuild --help`: interpreter start + click + the command modules, the import floor

Each ratio A/B is taken pair by pair (one A with the B right after it), so a machine that slows down during the run
moves both sides alike; the table shows medians. Wall seconds are what a user waits; on a busy machine they drift, so
the table also gives CPU seconds: the command's own processes plus the engine daemon's (dockerd, where BuildKit does
its work), read from /proc when the engine runs on this machine. --quick: one run, `--only` kept (CI).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from imagebuild.builder.bootstrap import spec_for  # noqa: E402
from imagebuild.inputs import BuildInputs  # noqa: E402
from imagebuild.models import ImagePlan, Plan  # noqa: E402
from imagebuild.plan import make_plan  # noqa: E402
from imagebuild.plan.assemble import select  # noqa: E402

DEBIAN_DOCKER = "/usr/bin/docker"  # Debian's docker.io CLI (20.10), not a newer CLI elsewhere on PATH
BUILDKIT_REPO = "ibnoop-buildkit"


@dataclass
class Timings:
    """Wall seconds and CPU seconds (children + engine daemon) per run of each command."""

    imagebuild: list[float]
    buildkit: list[float]
    floor: list[float]
    cpu: dict[str, list[float]]
    new_folder: list[float] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)

    def ratios(self, a: list[float], b: list[float]) -> list[float]:
        return [x / y for x, y in zip(a, b, strict=True)]


def daemon_pid() -> int | None:
    """The dockerd serving DOCKER_HOST on this machine (its pidfile or command line), else None (remote engine)."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not host.startswith("unix://"):
        return None
    socket = host[len("unix://"):]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"dockerd"):
            hosts = [a.decode() for a in argv if a.startswith(b"unix://")]
            if socket == "/var/run/docker.sock" and not hosts or f"unix://{socket}" in hosts:
                return int(proc.name)
    return None


def cpu_now(pid: int | None) -> float:
    """CPU seconds so far of this process's reaped children plus the engine daemon."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    if pid is not None:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
    return total


def build_args(args: argparse.Namespace, report: str = "report") -> list[str]:
    out = ["--matrix", args.matrix, "--plain", "--report-dir", str(args.work / report)]
    for pattern in args.only:
        out += ["--only", pattern]
    if args.wheelhouse:
        out += ["--wheelhouse", args.wheelhouse]
    for cert in args.ca_cert:
        out += ["--ca-cert", cert]
    if args.torch_index_url:
        out += ["--torch-index-url", args.torch_index_url]
    return out


def imagebuild_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "imagebuild", *args]


def run(cmd: list[str], env: dict[str, str], what: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


def docker_inspect(ref: str) -> dict:
    out = subprocess.run([DEBIAN_DOCKER, "image", "inspect", ref], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)[0]


def os_image_tag(image_id: str) -> str:
    """A tag of the OS image the base was built FROM (BuildKit needs a name, not an ID)."""
    tags = docker_inspect(image_id).get("RepoTags") or []
    if not tags:
        raise SystemExit(f"the OS image {image_id[:19]} has no tag for BuildKit's FROM")
    return tags[0]


def write_context(img: ImagePlan, folder: Path) -> None:
    """The build context imagebuild sends for `img`: its Dockerfile, context files and folders (wheelhouse, CA)."""
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(img.dockerfile, encoding="utf-8")
    for rel, data in img.context_files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    for rel, source in img.context_dirs.items():
        shutil.copytree(source, folder / rel)


def buildkit_commands(images: list[ImagePlan], base_from: str, work: Path) -> list[list[str]]:
    """One `docker build` per image, parents first; a child's BASE_IMAGE is its parent's BuildKit tag."""
    tags = {img.tag: f"{BUILDKIT_REPO}/{img.flavor}:{img.variant.key}" for img in images}
    cmds = []
    for img in images:
        folder = work / "contexts" / img.id
        write_context(img, folder)
        parent = tags[img.parent] if img.parent else base_from
        cmd = [DEBIAN_DOCKER, "build", "-q", "--network", "host", "-t", tags[img.tag],
               "--build-arg", f"BASE_IMAGE={parent}"]
        for key, value in {**img.build_args, **img.secret_build_args}.items():
            cmd += ["--build-arg", f"{key}={value}"]
        cmds.append([*cmd, str(folder)])
    return cmds


def buildkit_pass(cmds: list[list[str]], env: dict[str, str]) -> tuple[float, list[str]]:
    """(seconds, image IDs) of one pass over every image, as a user runs them: one `docker build` after the other."""
    ids = []
    start = time.perf_counter()
    for cmd in cmds:
        ids.append(run(cmd, env, "DOCKER_BUILDKIT=1 docker build " + cmd[-1]).stdout.strip().splitlines()[-1])
    return time.perf_counter() - start, ids


def timed(cmd: list[str], env: dict[str, str], what: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = run(cmd, env, what)
    return time.perf_counter() - start, proc


class CpuMeter:
    """CPU seconds (children + engine daemon) spent inside each `with meter.on(name):` block."""

    def __init__(self, timings: Timings) -> None:
        self.timings, self.pid = timings, daemon_pid()

    def add(self, name: str, start: float) -> None:
        self.timings.cpu.setdefault(name, []).append(cpu_now(self.pid) - start)


def not_up_to_date(report: Path, tags: set[str]) -> list[str]:
    """The selected images (`tags`) the report does not call up to date (empty: a true no-op)."""
    rows = json.loads(report.read_text(encoding="utf-8"))["images"]
    missing = tags - {r["tag"] for r in rows}
    return sorted(missing) + [r["tag"] for r in rows if r["tag"] in tags and r["status"] != "up-to-date"]


def machine() -> str:
    """When and where: the date, the processors and the load average while the runs were taken."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {os.cpu_count()} CPUs, load average {load}"


def measure(args: argparse.Namespace, plan: Plan) -> tuple[Timings, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "IMAGEBUILD_STATE_DIR": str(args.work / "state")}
    bk_env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    cli = imagebuild_cmd("build", *build_args(args))
    seconds, _ = timed(cli, env, "imagebuild build (the build the no-op repeats)")
    print(f"setup: imagebuild build {seconds:.1f} s", file=sys.stderr)
    images = select(plan, tuple(args.only))
    base = next(i for i in images if i.parent is None)
    base_from = os_image_tag(docker_inspect(spec_for(base.variant).tag)["Id"])  # the bootstrap image build FROMs
    cmds = buildkit_commands(images, base_from, args.work)
    try:
        return timed_runs(args, cli, env, cmds, bk_env, images), len(images)
    finally:  # BuildKit's images are copies beside imagebuild's: untag them (its build cache stays, `docker builder
        # prune` frees it)
        subprocess.run([DEBIAN_DOCKER, "rmi", *(cmd[cmd.index("-t") + 1] for cmd in cmds)], capture_output=True,
                       check=False)


def timed_runs(args: argparse.Namespace, cli: list[str], env: dict[str, str], cmds: list[list[str]],
               bk_env: dict[str, str], images: list[ImagePlan]) -> Timings:
    seconds, warm_ids = buildkit_pass(cmds, bk_env)
    print(f"setup: BuildKit cold pass {seconds:.1f} s ({len(cmds)} images)", file=sys.stderr)
    timings = Timings([], [], [], {})
    meter = CpuMeter(timings)
    tags = {i.tag for i in images}
    baseline_env = {**env, "PYTHONPATH": str(args.baseline_src)} if args.baseline_src else None

    def no_op(report: str, run_env: dict[str, str], name: str, into: list[float]) -> None:
        start = cpu_now(meter.pid)
        seconds, _ = timed(imagebuild_cmd("build", *build_args(args, report)), run_env, f"imagebuild build ({name})")
        meter.add(name, start)
        late = not_up_to_date(args.work / report / "build-report.json", tags)
        if late:
            raise SystemExit(f"not a no-op ({name}): {', '.join(late)} were not up to date")
        into.append(seconds)

    for n in range(args.runs):
        no_op("report", env, "imagebuild", timings.imagebuild)
        no_op(f"report-new-{n}", env, "new_folder", timings.new_folder)
        if baseline_env is not None:
            no_op(f"report-baseline-{n}", baseline_env, "baseline", timings.baseline)
        start = cpu_now(meter.pid)
        seconds, ids = buildkit_pass(cmds, bk_env)
        meter.add("buildkit", start)
        if ids != warm_ids:
            raise SystemExit("not a warm no-op: BuildKit gave other image IDs than its warm-up pass")
        timings.buildkit.append(seconds)
        start = cpu_now(meter.pid)
        seconds, _ = timed(imagebuild_cmd("--help"), env, "imagebuild --help")
        meter.add("floor", start)
        timings.floor.append(seconds)
    return timings


def table(t: Timings, matrix: str, images: int, runs: int, patterns: list[str], baseline: str | None = None) -> str:
    med = statistics.median
    only = "".join(f" --only {p}" for p in patterns)

    def ratio(a: list[float], b: list[float]) -> str:
        r = t.ratios(a, b)
        return f"{med(r):.2f}x ({min(r):.2f}–{max(r):.2f})"

    cpu = t.cpu
    rows = [
        (f"`imagebuild build --matrix {matrix}{only}`, no-op (whole process)", t.imagebuild, cpu["imagebuild"]),
        ("the same no-op into a new report folder (a fresh CI runner: state kept, reports not)", t.new_folder,
         cpu["new_folder"]),
    ]
    if baseline:
        rows.append((f"the same into a new report folder, code of {baseline}", t.baseline, cpu["baseline"]))
    rows += [
        (f"BuildKit warm no-op: {images} × `DOCKER_BUILDKIT=1 docker build` (Debian's docker CLI, Docker 20.10)",
         t.buildkit, cpu["buildkit"]),
        ("`imagebuild --help` (the import floor)", t.floor, cpu["floor"]),
    ]
    lines = [f"median of {runs} run(s), taken in turn, ratios pair by pair to the BuildKit no-op (min–max); CPU: the "
             f"command's processes + the engine daemon ({machine()})", "",
             "| command | wall s | wall vs BuildKit | CPU s | CPU vs BuildKit |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {name} | {med(wall):.3f} | {ratio(wall, t.buildkit)} | {med(c):.3f} | {ratio(c, cpu['buildkit'])} |"
              for name, wall, c in rows]
    return "\n".join(lines) + "\n"


def describe_tree(src: Path) -> str:
    """`src`'s checkout as the table names it: its commit (and `+changes` when its work tree differs)."""
    def git(*cmd: str) -> str:
        out = subprocess.run(["git", "-C", str(src), *cmd], capture_output=True, text=True, check=False)
        return out.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return str(src)
    return f"commit {commit}" + (" +changes" if git("status", "--porcelain", "--", ".") else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matrix", default="images/cpu.yaml")
    ap.add_argument("--only", action="append", default=[], help="passed to imagebuild build (and planned alike)")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--wheelhouse", default=os.environ.get("PIP_FIND_LINKS") or
                    ("/opt/wheels" if Path("/opt/wheels").is_dir() else None))
    ap.add_argument("--ca-cert", action="append", default=None,
                    help="repeatable (default: $PIP_CERT, else the system bundle)")
    ap.add_argument("--torch-index-url", default="none")
    ap.add_argument("--markdown", default=None, help="also write the table here (e.g. bench/noop-cpu.md)")
    ap.add_argument("--quick", action="store_true", help="one run (CI: the bench must run, not measure)")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="another source tree's src/ (the code before a change): its no-op into a new report folder "
                         "timed beside this one's, on the same state and engine")
    args = ap.parse_args()
    args.ca_cert = args.ca_cert or [os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"]
    if args.quick:
        args.runs = 1
    if not Path(DEBIAN_DOCKER).is_file():
        raise SystemExit(f"{DEBIAN_DOCKER} (Debian's docker.io CLI) is not installed")
    inputs = BuildInputs(ca_certs=tuple(Path(c) for c in args.ca_cert), torch_index_url=args.torch_index_url,
                         wheelhouse=Path(args.wheelhouse) if args.wheelhouse else None)
    plan = make_plan(Path(args.matrix), inputs)
    with tempfile.TemporaryDirectory(prefix="ibnoop-", dir="/var/tmp") as tmp:
        args.work = Path(tmp)
        timings, images = measure(args, plan)
    baseline = None
    if args.baseline_src:
        baseline = describe_tree(args.baseline_src)
    text = table(timings, args.matrix, images, args.runs, args.only, baseline)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(f"# No-op speed: {args.matrix} (bench/bench_noop.py)\n\n{text}",
                                       encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
