"""The registry as the cache of a fresh CI runner (prints a table; not a test).

Engine A (DOCKER_HOST or the default socket) builds, tests and pushes images/cpu.yaml to a local registry through a
byte-counting proxy. Then, on fresh engines with empty data-roots (each a new CI runner):
  B (a) `build` with nothing changed, registry-aware (the default);
  B (b) `build` after a change that only touches the dev flavor (an extra dev pip package);
  C, D (c) each again with --no-registry-cache on its own fresh engine: the baseline, every image built from scratch.
For each: wall seconds of the whole `imagebuild build` process, bytes the engine pulled through the proxy, images
pulled and built. Goals (issue 10): (a) <= 5 s and 0 bytes; (b) runtime pulled once by digest, only dev built.

Needs Debian's docker-registry, mmdebstrap (engine C bootstraps), the wheelhouse (PIP_FIND_LINKS) and PIP_CERT.

--quick (CI: the bench must run, not measure): the base image only (`--only base`: scripts/bench-quick.sh has built
it on engine A already), A pushes it without --test, and only B (a) runs: no rebuild from scratch on a fresh engine.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from faultproxy import FaultProxy  # noqa: E402  (a counting TCP proxy; no faults configured here)

WHEELHOUSE = os.environ.get("PIP_FIND_LINKS") or "/opt/wheels"
CA = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"


def imagebuild(work: Path, *args: str, env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    full = {**os.environ, "PYTHONPATH": str(work / "src"), **(env or {})}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "imagebuild", *args], cwd=work, env=full, capture_output=True,
                         text=True, timeout=5400)
    seconds = time.monotonic() - t0
    if out.returncode != 0:
        sys.exit(f"imagebuild {' '.join(args[:1])} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return seconds, out


def fresh_engine(tag: str) -> tuple[str, str]:
    directory = tempfile.mkdtemp(prefix=f"ib{tag}.", dir="/var/tmp")
    out = subprocess.run(["bash", str(ROOT / "scripts" / "docker-engine.sh"), "--fresh", directory],
                         capture_output=True, text=True, check=True)
    return directory, out.stdout.strip().split("=", 1)[1]


def stop_engine(directory: str) -> None:
    subprocess.run(["bash", str(ROOT / "scripts" / "docker-engine.sh"), "--stop", directory], capture_output=True)
    shutil.rmtree(directory, ignore_errors=True)


def statuses(report: Path) -> tuple[int, int]:
    rows = json.loads(report.read_text())["images"]
    pulled = sum(1 for r in rows if (r.get("source") or "").startswith("pulled"))
    built = sum(1 for r in rows if r["status"] == "built")
    return pulled, built


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="base only, scenario B (a) only (CI)")
    args = ap.parse_args()
    only = ["--only", "base"] if args.quick else []
    work = Path(tempfile.mkdtemp(prefix="ib-bench-cache-"))
    for part in ("src", "templates", "images"):
        shutil.copytree(ROOT / part, work / part)
    dev_matrix = work / "images" / "cpu-devchange.yaml"
    text = (work / "images" / "cpu.yaml").read_text()
    dev_matrix.write_text(text.replace("    runtime: [numpy]", "    runtime: [numpy]\n    dev: [six]"))
    reg = subprocess.run(["bash", str(ROOT / "scripts" / "registry.sh"), "--quiet"], capture_output=True, text=True,
                         check=True)
    info = dict(line.split("=", 1) for line in reg.stdout.split() if "=" in line)
    host, port = info["REGISTRY"].split(":")
    rows = []
    engines = []
    try:
        with FaultProxy((host, int(port))) as proxy:
            prefix = f"{proxy.address}/bench{secrets.token_hex(3)}"

            def build_args(matrix: str, report: str) -> list[str]:
                return ["--matrix", matrix, "--registry", prefix, "--wheelhouse", WHEELHOUSE, "--ca-cert", CA,
                        "--torch-index-url", "none", "--plain", "--report-dir", report, *only]

            env_a = {"IMAGEBUILD_STATE_DIR": str(work / "state-a")}
            tested = [] if args.quick else ["--test"]
            s, _ = imagebuild(work, "build", *build_args("images/cpu.yaml", "rep-a"), *tested, "--push",
                              env=env_a)
            rows.append((f"A: build {' '.join(tested + only)} --push (engine with its cache)", s, None, None, None))
            # B: one fresh engine, (a) then (b), registry-aware. Baseline: each scenario on its OWN fresh engine
            # (C, D), as a new CI runner would start it: everything built from scratch.
            runners = (("B", True, (("(a) nothing changed", "images/cpu.yaml"),
                                    ("(b) dev-only change", "images/cpu-devchange.yaml"))),
                       ("C", False, (("(a) nothing changed", "images/cpu.yaml"),)),
                       ("D", False, (("(b) dev-only change", "images/cpu-devchange.yaml"),)))
            if args.quick:
                runners = (("B", True, (("(a) nothing changed", "images/cpu.yaml"),)),)
            for name, cache, scenarios in runners:
                directory, docker_host = fresh_engine(name)
                engines.append(directory)
                env = {"DOCKER_HOST": docker_host, "IMAGEBUILD_STATE_DIR": str(work / f"state-{name}")}
                flag = [] if cache else ["--no-registry-cache"]
                for label, matrix in scenarios:
                    proxy.reset_counters()
                    report = f"rep-{name}-{label[1]}"
                    s, _ = imagebuild(work, "build", *build_args(matrix, report), *flag, env=env)
                    pulled, built = statuses(work / report / "build-report.json")
                    what = "registry-aware" if cache else "baseline, --no-registry-cache"
                    rows.append((f"{name} fresh engine, {label}, {what}", s, proxy.bytes_down, pulled, built))
    finally:
        for directory in engines:
            stop_engine(directory)
        subprocess.run(["bash", str(ROOT / "scripts" / "registry.sh"), "--stop", "--dir", info["REGISTRY_DIR"]],
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)

    head = ("scenario", "seconds", "bytes pulled", "images pulled", "images built")
    table = [head] + [(r[0], f"{r[1]:.1f}", "-" if r[2] is None else f"{r[2]:,}",
                       "-" if r[3] is None else str(r[3]), "-" if r[4] is None else str(r[4])) for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for r in table:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
