#!/usr/bin/env python3
"""Classic builder vs BuildKit backend, side by side on ONE engine (figures, not tests). Prints a table.

The engine is DOCKER_HOST's and must be >= 23 for the BuildKit backend (scripts/modern-engine.sh --fresh DIR starts
dockerd 26.1; export its DOCKER_HOST and DOCKER_CONFIG). Every measure is one `imagebuild build` CLI run:

1. cold CPU matrix: the plan's images and the engine's build cache removed first (the bootstrapped OS image stays:
   both backends start from it). Goal: BuildKit <= 0.6x classic.
2. one pip package added to the runtime (`six` beside numpy): that image's build seconds (report) vs its cold build.
   Goal <= 0.3x (BuildKit: the pip download cache mount; classic: no cache for a changed pip layer).
3. no-op: the same matrix again (everything up to date) vs a `docker buildx bake` of the exported compose file
   (BuildKit's cache answers every step). Goal <= 1.0x.
4. a fresh runner rebuilding a changed dev image (one dev pip package more): the engine emptied of the plan's images
   and of every build cache (the OS image stays: a runner pulls it), the whole matrix built with `--buildkit-cache`
   (a registry cache a first build exported to a local docker-registry) vs without it.

--quick (CI: scripts/bench-quick.sh, on the BuildKit engine): the CPU matrix's base image only, BuildKit cold and its
no-op; nothing compared, so that the bench cannot rot without an hour of builds in every CI run.

--noop-side-by-side [--only PATTERN] [--runs N]: measure 3 alone, in turn (A B, A B, ...): a whole-process no-op
`imagebuild build` of the matrix as `make build-cpu` builds it (no input flags, the default backend auto) vs a
`docker buildx bake` no-op of the exported compose file's targets for the same images; both are built once first,
not timed. The bake's tags are set aside (`--set *.tags=benchbake/...`) so neither run retags the other's image.
Medians, the ratio pair by pair; CPU seconds are the commands' own processes (not dockerd's).

Usage:
  eval "$(scripts/modern-engine.sh --fresh /var/tmp/ib-bench)"
  python bench/bench_buildkit.py --wheelhouse /opt/wheels --ca-cert $PIP_CERT [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MATRIX = ROOT / "images" / "cpu.yaml"


def run(argv: list[str], env: dict[str, str] | None = None, timeout: int = 7200,
        cwd: Path | None = None) -> tuple[float, int, str]:
    start = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout,
                         check=False, cwd=cwd)
    return time.monotonic() - start, out.returncode, (out.stdout + out.stderr)[-2000:]


def imagebuild(args: argparse.Namespace, backend: str, matrix: Path, work: Path, *extra: str) -> tuple[float, dict]:
    report = work / f"report-{backend}"
    argv = [sys.executable, "-m", "imagebuild", "build", "--matrix", str(matrix), "--backend", backend,
            "--wheelhouse", args.wheelhouse, "--ca-cert", args.ca_cert, "--torch-index-url", "none", "--plain",
            "--no-registry-cache", "--no-sbom", "--report-dir", str(report), *extra]
    seconds, code, tail = run(argv, env={"PYTHONPATH": str(ROOT / "src"),
                                         "IMAGEBUILD_STATE_DIR": str(work / f"state-{backend}")})
    if code != 0:
        raise SystemExit(f"imagebuild build --backend {backend} failed ({code}):\n{tail}")
    doc = json.loads((report / "build-report.json").read_text())
    return seconds, {row["tag"].rsplit("-", 1)[-1]: row for row in doc["images"]}


def clean_engine(tags: list[str]) -> None:
    """A fresh runner's engine: every reference but the OS base's (imagebuild-os/*) untagged (the plan's tags, their
    aliases, the parents' pin tags: an alias left behind would make an image up to date), dangling images removed,
    every build cache pruned."""
    listed = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                            text=True, check=False).stdout.split()
    refs = [r for r in listed if not r.startswith("imagebuild-os/") and not r.endswith(":<none>")]
    for ref in sorted(set(refs) | set(tags)):
        run(["docker", "image", "rm", "-f", ref])
    run(["docker", "image", "prune", "-f"])
    run(["docker", "builder", "prune", "-af"])


def plan_tags(matrix: Path) -> list[str]:
    sys.path.insert(0, str(ROOT / "src"))
    from imagebuild.plan import make_plan

    return [img.tag for img in make_plan(matrix).images]


def matrix_with(work: Path, line: str, replacement: str, name: str) -> Path:
    """images/cpu.yaml with `line` replaced (a changed pip package list), written as work/name."""
    text = MATRIX.read_text()
    assert line in text, f"images/cpu.yaml changed: update bench_buildkit's {name}"
    path = work / name
    path.write_text(text.replace(line, replacement))
    return path


def with_six(work: Path) -> Path:  # measure 2: one pip package more in the runtime
    return matrix_with(work, "runtime: [numpy]", "runtime: [numpy, six]", "cpu.yaml")


def with_dev_package(work: Path) -> Path:  # measure 4: one pip package more in the dev image
    return matrix_with(work, "    runtime: [numpy]", "    runtime: [numpy]\n    dev: [six]", "cpu-dev-six.yaml")


def registry_cache(args: argparse.Namespace, work: Path, tags: list[str]) -> tuple[float, float, str]:
    """(seconds with the registry cache, seconds without, note): measure 4."""
    reg = subprocess.run(["bash", str(ROOT / "scripts" / "registry.sh"), "--quiet"], capture_output=True, text=True,
                         check=False, timeout=60)
    if reg.returncode != 0:
        raise SystemExit(f"scripts/registry.sh failed: {reg.stderr}")
    info = dict(w.split("=", 1) for w in reg.stdout.split() if "=" in w)
    cache = ("--buildkit-cache", f"{info['REGISTRY']}/bench-buildkit-cache")
    changed = with_dev_package(work)
    try:
        clean_engine(tags)
        imagebuild(args, "buildkit", MATRIX, work, "--force", *cache)  # the first runner: exports every stage
        clean_engine(tags)
        with_cache, rows = imagebuild(args, "buildkit", changed, work, *cache)
        clean_engine(tags)
        without, _ = imagebuild(args, "buildkit", changed, work)
    finally:
        subprocess.run(["bash", str(ROOT / "scripts" / "registry.sh"), "--stop", "--dir", info["REGISTRY_DIR"]],
                       capture_output=True, check=False, timeout=60)
    dev = rows["dev"].get("build_seconds") or 0
    return with_cache, without, f"with the cache: dev {dev:.0f} s of it"


def bake_noop(args: argparse.Namespace, work: Path) -> float:
    out = work / "bake" / "docker-bake.yml"
    _, code, tail = run([sys.executable, "-m", "imagebuild", "bake", "--matrix", str(MATRIX), "--wheelhouse",
                         args.wheelhouse, "--ca-cert", args.ca_cert, "--torch-index-url", "none", "-o", str(out)],
                        env={"PYTHONPATH": str(ROOT / "src")})
    if code != 0:
        raise SystemExit(f"imagebuild bake failed:\n{tail}")
    base = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "imagebuild-os/*"],
                          capture_output=True, text=True, check=False).stdout.split()
    env = {f"OS_IMAGE_{'debian12'}": base[0]} if base else {}
    argv = ["docker", "buildx", "bake", "-f", str(out), "--progress", "plain", "--provenance=false"]
    # from the bake file's folder (its contexts are relative paths); the first bake fills its own cache
    _, code, tail = run(argv, env=env, timeout=7200, cwd=out.parent)
    if code != 0:
        raise SystemExit(f"docker buildx bake failed:\n{tail}")
    seconds, code, tail = run(argv, env=env, cwd=out.parent)
    if code != 0:
        raise SystemExit(f"docker buildx bake failed:\n{tail}")
    return seconds


def noop_side_by_side(args: argparse.Namespace) -> int:
    import shutil

    work = Path(tempfile.mkdtemp(prefix="bench-noop-bake-"))
    try:
        return _noop_side_by_side(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _noop_side_by_side(args: argparse.Namespace, work: Path) -> int:
    import resource
    import statistics

    only = ["--only", args.only] if args.only else []
    env = {"PYTHONPATH": str(ROOT / "src"), "IMAGEBUILD_STATE_DIR": str(work / "state")}
    build = [sys.executable, "-m", "imagebuild", "build", "--matrix", str(MATRIX), "--plain", *only,
             "--report-dir", str(work / "report")]
    sys.path.insert(0, str(ROOT / "src"))
    from imagebuild.builder.bake import target_name
    from imagebuild.plan import make_plan

    _, code, tail = run(build, env=env)  # once, not timed: a real build where the engine lacks the images
    if code != 0:
        raise SystemExit(f"imagebuild build failed:\n{tail}")
    out = work / "bake" / "docker-bake.yml"  # exported after the build: the record names the backend auto chose
    _, code, tail = run([sys.executable, "-m", "imagebuild", "bake", "--matrix", str(MATRIX), "-o", str(out)], env=env)
    if code != 0:
        raise SystemExit(f"imagebuild bake failed:\n{tail}")

    def statuses() -> dict[str, str]:
        doc = json.loads((work / "report" / "build-report.json").read_text())
        return {row["tag"]: row["status"] for row in doc["images"] if row["status"] != "skipped"}

    images = [i for i in make_plan(MATRIX).images if i.tag in statuses()]
    bake = ["docker", "buildx", "bake", "-f", str(out), *(target_name(i.id) for i in images), "--progress", "plain",
            "--provenance=false", *(a for i in images for a in ("--set", f"{target_name(i.id)}.tags=benchbake/"
                                                                         f"{target_name(i.id).lower()}:noop"))]
    _, code, tail = run(bake, env=env, cwd=out.parent)  # once, not timed: fills bake's own cache
    if code != 0:
        raise SystemExit(f"docker buildx bake failed:\n{tail}")
    commands = {"imagebuild build (no-op)": (build, None), "docker buildx bake (no-op)": (bake, out.parent)}
    wall: dict[str, list[float]] = {k: [] for k in commands}
    cpu: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(args.runs):
        for name, (argv, cwd) in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            seconds, code, tail = run(argv, env=env, cwd=cwd)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if code != 0 or (name.startswith("imagebuild") and set(statuses().values()) != {"up-to-date"}):
                raise SystemExit(f"{name} was not a no-op ({code}):\n{tail}")
            wall[name].append(seconds)
            cpu[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    ib, bk = commands
    ratios = [a / b for a, b in zip(wall[ib], wall[bk], strict=True)]
    print(f"{args.runs} runs in turn, {len(images)} image(s), load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for name in commands:
        print(f"{name}: wall median {statistics.median(wall[name]):.2f} s (min {min(wall[name]):.2f}), "
              f"CPU median {statistics.median(cpu[name]):.2f} s")
    print(f"ratio (pair by pair, median): {statistics.median(ratios):.2f}x (min {min(ratios):.2f}) (goal <= 1.0x)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheelhouse", default=os.environ.get("PIP_FIND_LINKS", "/opt/wheels"))
    parser.add_argument("--ca-cert", default=os.environ.get("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt"))
    parser.add_argument("--quick", action="store_true", help="the base image through BuildKit only: cold + no-op")
    parser.add_argument("--noop-side-by-side", action="store_true",
                        help="measure 3 alone: imagebuild's whole-process no-op vs bake's, in turn")
    parser.add_argument("--only", default=None, help="with --noop-side-by-side: the images (a build --only pattern)")
    parser.add_argument("--runs", type=int, default=7, help="with --noop-side-by-side: rounds (default 7)")
    args = parser.parse_args()
    if args.quick:
        return quick(args)
    if args.noop_side_by_side:
        return noop_side_by_side(args)  # its work folder (bake contexts, record) is removed after
    rows: list[tuple[str, str, str, str]] = []  # measure, classic, buildkit, ratio / note

    def add(row: tuple[str, str, str, str]) -> None:  # each row as soon as it is measured: a later failure keeps it
        rows.append(row)
        print("row: " + " | ".join(row), file=sys.stderr, flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-buildkit-"))
    tags = plan_tags(MATRIX)
    cold: dict[str, tuple[float, dict]] = {}
    noop: dict[str, float] = {}
    added: dict[str, float] = {}
    changed = with_six(work)
    imagebuild(args, "classic", MATRIX, work, "--only", "base")  # bootstraps the OS image once, outside the timings
    for backend in ("classic", "buildkit"):  # each backend on an emptied engine: cold, its own no-op, +1 package
        clean_engine(tags)
        cold[backend] = imagebuild(args, backend, MATRIX, work, "--force")
        print(f"cold {backend}: " + ", ".join(f"{f} {r.get('build_seconds') or 0:.0f} s"
                                               for f, r in cold[backend][1].items()), file=sys.stderr, flush=True)
        noop[backend] = imagebuild(args, backend, MATRIX, work)[0]
        _, per = imagebuild(args, backend, changed, work)
        added[backend] = float(per["runtime"]["build_seconds"])
    add(("cold CPU matrix (s)", f"{cold['classic'][0]:.0f}", f"{cold['buildkit'][0]:.0f}",
         f"{cold['buildkit'][0] / cold['classic'][0]:.2f}x (goal <= 0.6x)"))
    base_rt = {b: float(cold[b][1]["runtime"]["build_seconds"]) for b in cold}
    add(("+1 pip package: runtime build (s)", f"{added['classic']:.0f} (cold {base_rt['classic']:.0f})",
         f"{added['buildkit']:.0f} (cold {base_rt['buildkit']:.0f})",
         f"{added['buildkit'] / base_rt['buildkit']:.2f}x its cold build (goal <= 0.3x)"))
    bake = bake_noop(args, work)
    add(("no-op, whole CLI (s)", f"{noop['classic']:.1f}", f"{noop['buildkit']:.1f}",
         f"bake no-op {bake:.1f} s: {noop['buildkit'] / bake:.2f}x (goal <= 1.0x)"))
    with_cache, without, note = registry_cache(args, work, tags)
    add(("fresh runner, changed dev: whole matrix (s)", "-", f"{with_cache:.0f} cache / {without:.0f} none",
                 f"{with_cache / without:.2f}x ({note})"))
    version = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                             text=True, check=False).stdout.strip()
    print(f"engine {version} at {os.environ.get('DOCKER_HOST', 'default socket')}; {os.cpu_count()} CPUs")
    widths = [max(len(r[i]) for r in rows + [("measure", "classic", "buildkit", "ratio")]) for i in range(4)]
    for row in [("measure", "classic", "buildkit", "ratio")] + rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    return 0


def quick(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-buildkit-"))
    cold, _ = imagebuild(args, "buildkit", MATRIX, work, "--only", "base")
    noop, _ = imagebuild(args, "buildkit", MATRIX, work, "--only", "base")
    print(f"--quick (base only, not a measurement): BuildKit cold {cold:.1f} s, no-op {noop:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
