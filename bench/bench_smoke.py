"""The smoke suite's time per image (a figure, not a test): `imagebuild test` as the pipeline runs it (the main
container, its side containers, one pytest process), RUNS times per image of the matrix, and where the time goes.

    PYTHONPATH=src python bench/bench_smoke.py [--matrix images/cpu.yaml] [--only PATTERN] [--runs 3]
        [--markdown FILE] [--wheelhouse DIR] [--ca-cert PEM] [--torch-index-url none] [--quick]

Needs an engine (DOCKER_HOST or the default socket). First, not timed: `imagebuild build` of the matrix (`--only`
kept; a no-op when the engine holds it). Then each image RUNS times, one after the other: the wall seconds of
runner.run_smoke (container start to removal), the main probe's wall seconds and its slowest sections (the probe's
own section_seconds), and each side probe's wall seconds (root, arbitrary UID, hpc: they run alongside the main
one). The goal (issue 26): <= 30 s per CPU image on a quiet machine; a busy machine stretches every figure, so the
table says how many CPUs the machine has, its load average when the run began, and how long a fixed pure-Python
loop took at the start and at the end (a slower vCPU stretches every figure too, with no load to show for it). --quick: the base image, once
(CI: scripts/bench-quick.sh).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from imagebuild.inputs import BuildInputs  # noqa: E402
from imagebuild.plan import make_plan  # noqa: E402
from imagebuild.plan.assemble import matches  # noqa: E402
from imagebuild.smoke import runner  # noqa: E402

GOAL_SECONDS = 30.0


def build(args: argparse.Namespace) -> None:
    cmd = [sys.executable, "-m", "imagebuild", "build", "--matrix", args.matrix, "--plain", "--only", args.only]
    for flag, value in (("--wheelhouse", args.wheelhouse), ("--ca-cert", args.ca_cert),
                        ("--torch-index-url", args.torch_index_url)):
        if value:
            cmd += [flag, value]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_smoke: the build failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")


def one_run(tag: str) -> dict:
    """One smoke run of `tag`: wall seconds, the probes' and the outcome."""
    t0 = time.time()
    tests = runner.run_smoke(tag, name_prefix="ibbench-smoke", result_dir=None)
    wall = time.time() - t0
    failed = [c["name"] for c in tests["checks"] if c["status"] == "failed"]
    return {"wall": wall, "start": tests.get("start_seconds") or 0.0, "probe": tests.get("probe_wall_seconds") or 0.0,
            "sides": tests.get("extra_probe_seconds") or {}, "sections": _sections(tests), "failed": failed,
            "counts": (tests["passed"], tests["failed"], tests["skipped"])}


def _sections(tests: dict) -> dict[str, float]:
    """The main probe's own seconds per section."""
    return dict(tests.get("probe_section_seconds") or {})


def row(tag: str, runs: list[dict]) -> str:
    walls = [r["wall"] for r in runs]
    last = runs[-1]
    sides = ", ".join(f"{k} {v:.1f}" for k, v in sorted(last["sides"].items()) if v is not None)
    slow = ", ".join(f"{k} {v:.1f}" for k, v in sorted(last["sections"].items(), key=lambda kv: -kv[1])[:3])
    p, f, s = last["counts"]
    goal = "met" if statistics.median(walls) <= GOAL_SECONDS else "not met"
    return (f"| {tag} | {len(runs)} | {statistics.median(walls):.1f} | {min(walls):.1f} | {last['start']:.1f} | "
            f"{last['probe']:.1f} ({slow or '-'}) | {sides or '-'} | {p}/{f}/{s} | {goal} |")


REFERENCE = "sum(i * i for i in range(30_000_000))"  # pure python, one core: the machine's speed at the time


def reference_seconds() -> float:
    """The best of three runs of REFERENCE in a fresh python: how fast this machine is right now. Its vCPUs' speed
    moves by a fifth or more over a day (neighbours on the host), which a load average does not show."""
    code = f"import time; t = time.perf_counter(); {REFERENCE}; print(time.perf_counter() - t)"
    return min(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout) for _ in range(3))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", default=str(ROOT / "images" / "cpu.yaml"))
    ap.add_argument("--only", default="runtime,dev", help="which images (imagebuild's --only pattern)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--markdown", help="also write the table here")
    ap.add_argument("--wheelhouse", default=os.environ.get("IMAGEBUILD_WHEELHOUSE", "/opt/wheels"))
    ap.add_argument("--ca-cert", default=os.environ.get("IMAGEBUILD_CA_CERT"))
    ap.add_argument("--torch-index-url", default="none")
    ap.add_argument("--quick", action="store_true", help="the base image, once (CI)")
    args = ap.parse_args()
    if args.quick:
        args.only, args.runs = "base", 1
    load = os.getloadavg()[0]
    build(args)
    speed = reference_seconds()
    inputs = BuildInputs(ca_certs=(Path(args.ca_cert),) if args.ca_cert else (),
                         torch_index_url=args.torch_index_url, wheelhouse=Path(args.wheelhouse))
    images = [i for i in make_plan(Path(args.matrix), inputs).images if matches(i, args.only)]
    lines = [f"machine: {os.cpu_count()} CPUs, load average {load:.1f} at the start, reference loop {speed:.2f} s "
             f"(`{REFERENCE}`, best of 3); goal <= {GOAL_SECONDS:.0f} s per CPU image on a quiet machine", "",
             "| image | runs | median s | min s | containers up s | main probe s (slowest sections) | side probes s "
             "| pass/fail/skip | goal |", "|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for img in images:
        runs = [one_run(img.tag) for _ in range(args.runs)]
        lines.append(row(img.tag, runs))
        print(lines[-1], flush=True)
        if runs[-1]["failed"]:
            print(f"bench_smoke: {img.tag} failed {', '.join(runs[-1]['failed'])}", file=sys.stderr)
            return 1
    lines.append(f"reference loop at the end: {reference_seconds():.2f} s")
    print(lines[-1], flush=True)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
