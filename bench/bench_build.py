#!/usr/bin/env python3
"""Build benchmarks (figures, not tests). Prints a table.

1. no-op rebuild: `imagebuild build` of an already built matrix (API call and whole CLI process) vs
   `docker build` (classic builder, warm cache) of the same rendered Dockerfiles and contexts. Goal: ratio <= 0.1.
2. cold build (--cold-matrix FILE, a 2-variant matrix): one imagebuild run on an empty private engine vs each
   variant built on its own empty engine (each with its own base): time ratio and how many base builds each did.
3. size / floor of every runtime image: image size vs (parent image size + installed size of the Python
   distributions the runtime added). Goal: <= 1.03. `--size-only REF[=PARENT]...` measures given images instead
   (e.g. the CUDA runtime of `make e2e-cuda`: `--size-only <runtime tag>=<base tag>`).

Usage:
  python bench/bench_build.py --matrix images/cpu.yaml --wheelhouse /opt/wheels --ca-cert $PIP_CERT \\
      --torch-index-url none [--cold-matrix two.yaml] [--registry ibdev-build-bench] [--only PATTERN] [--quick]

--only PATTERN: only these images of the matrix (and the parents they need), as `imagebuild build --only`.
--quick (CI: the bench must run, not measure): no cold comparison; the engine should already hold the selection
(scripts/bench-quick.sh builds `--only base` first), so the "initial build" is a no-op too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from imagebuild.builder import BuildOptions, build_plan  # noqa: E402
from imagebuild.builder.bootstrap import spec_for  # noqa: E402
from imagebuild.builder.buildargs import proxy_build_args  # noqa: E402
from imagebuild.builder.context import build_context  # noqa: E402
from imagebuild.builder.progress import Progress  # noqa: E402
from imagebuild.builder.uptodate import INPUTS_LABEL  # noqa: E402
from imagebuild.engine import connect  # noqa: E402
from imagebuild.inputs import BuildInputs  # noqa: E402
from imagebuild.models import Plan  # noqa: E402
from imagebuild.units import format_size  # noqa: E402

console = Console(width=150)
rows: list[tuple[str, str, str]] = []  # (measure, value, note)

INSTALLED_SIZE = r"""
import importlib.metadata as md, json, os, sys
seen, total, per = set(), 0, {}
for d in md.distributions(path=[p for p in sys.path if p.startswith('/opt/venv')]):
    n = 0
    for f in d.files or []:
        p = os.path.realpath(d.locate_file(f))
        if p in seen or not os.path.isfile(p):
            continue
        seen.add(p)
        n += os.lstat(p).st_size
    per[d.metadata['Name']] = n
    total += n
print(json.dumps({"total": total, "per": per}))
"""


def add(measure: str, value: str, note: str = "") -> None:
    rows.append((measure, value, note))
    console.print(f"  {measure}: {value} {note}", highlight=False)


def make_plan(matrix: str, args) -> Plan:
    from imagebuild.plan import make_plan as mk
    from imagebuild.plan.assemble import select

    plan = mk(Path(matrix), inputs(args), args.registry)
    return Plan(plan.matrix_file, select(plan, tuple(args.only)), plan.lock_file) if args.only else plan


def inputs(args) -> BuildInputs:
    return BuildInputs(ca_certs=tuple(Path(c) for c in args.ca_cert), torch_index_url=args.torch_index_url,
                       wheelhouse=Path(args.wheelhouse) if args.wheelhouse else None)


def cli_args(args, matrix: str) -> list[str]:
    out = ["--matrix", matrix, "--plain"]
    if args.registry is not None:
        out += ["--registry", args.registry]
    if args.wheelhouse:
        out += ["--wheelhouse", args.wheelhouse]
    for c in args.ca_cert:
        out += ["--ca-cert", c]
    if args.torch_index_url:
        out += ["--torch-index-url", args.torch_index_url]
    for pattern in args.only:
        out += ["--only", pattern]
    return out


# -- 1. no-op rebuild ------------------------------------------------------------------------------------------
def docker_build_warm(client, plan: Plan, tmp: Path) -> tuple[float, int, list[str]]:
    """`docker build` (classic builder) of every rendered Dockerfile in dependency order, same args and labels as
    the images imagebuild built (so a warm cache can answer every step). Returns (seconds, cache misses, tags)."""
    ids: dict[str, str] = {}
    tags, misses, total = [], 0, 0.0
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    for img in plan.images:
        info = client.api.inspect_image(img.tag)
        labels = info["Config"]["Labels"] or {}
        base_id = ids.get(img.parent) if img.parent else client.api.inspect_image(spec_for(img.variant).tag)["Id"]
        ctx = tmp / img.id
        ctx.mkdir(parents=True)
        f = build_context(img)
        with tarfile.open(fileobj=f) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(ctx, filter="data")
            else:
                tar.extractall(ctx)
        f.close()
        tag = f"ibdev-build-bench-{uuid.uuid4().hex[:8]}:{img.flavor}"
        cmd = ["docker", "build", "-q", "--network", "host", "-t", tag,
               "--build-arg", f"BASE_IMAGE={base_id}",
               "--build-arg", f"CREATED={labels.get('org.opencontainers.image.created', '')}",
               "--build-arg", f"REVISION={labels.get('org.opencontainers.image.revision', '')}"]
        for k, v in {**img.build_args, **img.secret_build_args, **proxy_build_args()}.items():
            cmd += ["--build-arg", f"{k}={v}"]
        for k, v in {**img.labels, INPUTS_LABEL: img.inputs_hash}.items():
            cmd += ["--label", f"{k}={v}"]
        t0 = time.monotonic()
        out = subprocess.run([*cmd, str(ctx)], capture_output=True, text=True, env=env)
        total += time.monotonic() - t0
        if out.returncode != 0:
            raise SystemExit(f"docker build of {img.id} failed:\n{out.stderr[-2000:]}")
        new_id = out.stdout.strip().splitlines()[-1]
        ids[img.tag] = new_id
        tags.append(tag)
        if new_id != info["Id"]:
            misses += 1
        shutil.rmtree(ctx, ignore_errors=True)
    return total, misses, tags


def bench_noop(client, args) -> Plan:
    console.rule("no-op rebuild")
    t0 = time.monotonic()
    plan = make_plan(args.matrix, args)
    plan_s = time.monotonic() - t0
    t0 = time.monotonic()
    first = build_plan(client, plan, BuildOptions(log_dir=Path(args.log_dir), check_disk=False), Progress())
    first_s = time.monotonic() - t0
    if any(r.status not in ("built", "up-to-date") for r in first):
        raise SystemExit("the matrix does not build: " + "; ".join(f"{r.tag}: {r.error}" for r in first if r.error))
    add("initial build (engine state as found)", f"{first_s:.1f}s",
        f"({sum(r.status == 'built' for r in first)} built, {sum(r.status == 'up-to-date' for r in first)} "
        "up to date)")
    t0 = time.monotonic()
    again = build_plan(client, plan, BuildOptions(log_dir=Path(args.log_dir), check_disk=False), Progress())
    api_s = time.monotonic() - t0
    assert all(r.status == "up-to-date" for r in again), [r.status for r in again]
    cli = [sys.executable, "-m", "imagebuild", "build", *cli_args(args, args.matrix), "--log-dir", args.log_dir,
           "--report-dir", str(Path(args.log_dir) / "report")]
    for _ in range(2):  # the first run into a new report folder writes the SBOMs and the record: not a no-op yet
        t0 = time.monotonic()
        proc = subprocess.run(cli, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        cli_s = time.monotonic() - t0
        if proc.returncode != 0:
            raise SystemExit(f"imagebuild build failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    with tempfile.TemporaryDirectory(prefix="ibbench-") as tmp:
        docker_s, misses, tags = docker_build_warm(client, plan, Path(tmp))
    for t in tags:
        try:
            client.api.remove_image(t, noprune=True)
        except Exception:
            pass
    add("plan (load, resolve, render, hash)", f"{plan_s:.2f}s")
    add("imagebuild no-op, build_plan()", f"{api_s:.2f}s", f"{len(plan.images)} images up to date")
    add("imagebuild no-op, whole `imagebuild build` process", f"{cli_s:.2f}s")
    add("docker build, warm cache, same Dockerfiles", f"{docker_s:.2f}s",
        f"{misses} image(s) not answered fully from cache")
    add("ratio no-op API / docker build", f"{api_s / docker_s:.3f}", "(goal <= 0.1)")
    add("ratio no-op CLI / docker build", f"{cli_s / docker_s:.3f}", "(goal <= 0.1)")
    return plan


# -- 2. cold build ---------------------------------------------------------------------------------------------
class PrivateEngine:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="ibb-", dir="/var/tmp"))

    def __enter__(self):
        out = subprocess.run([str(ROOT / "scripts/docker-engine.sh"), "--fresh", str(self.dir)], check=True,
                             capture_output=True, text=True).stdout
        host = out.strip().split("DOCKER_HOST=", 1)[1]
        import docker

        self.client = docker.DockerClient(base_url=host, timeout=900)
        return self.client

    def __exit__(self, *exc):
        self.client.close()
        subprocess.run([str(ROOT / "scripts/docker-engine.sh"), "--stop", str(self.dir)], check=False,
                       capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def timed_build(client, plan: Plan, log_dir: str) -> tuple[float, list]:
    t0 = time.monotonic()
    res = build_plan(client, plan, BuildOptions(log_dir=Path(log_dir), check_disk=False), Progress())
    bad = [r for r in res if r.status not in ("built", "up-to-date")]
    if bad:
        raise SystemExit("cold build failed: " + "; ".join(f"{r.tag}: {r.error}" for r in bad))
    return time.monotonic() - t0, res


def bench_cold(args) -> None:
    console.rule("cold build: shared plan vs independent builds")
    plan = make_plan(args.cold_matrix, args)
    variants = list(dict.fromkeys(i.variant.key for i in plan.images))
    if len(variants) < 2:
        add("cold build", "skipped", f"{args.cold_matrix} has {len(variants)} variant(s); give a 2-variant matrix")
        return
    with PrivateEngine() as client:
        shared_s, res = timed_build(client, plan, args.log_dir)
        shared_bases = sum(r.flavor == "base" and r.status == "built" for r in res)
        boots = len(client.api.images(name="imagebuild-os/*"))
    indep_s, indep_bases, indep_boots = 0.0, 0, 0
    for key in variants:
        sub = Plan(plan.matrix_file, [i for i in plan.images if i.variant.key == key])
        with PrivateEngine() as client:
            s, res = timed_build(client, sub, args.log_dir)
            indep_s += s
            indep_bases += sum(r.flavor == "base" and r.status == "built" for r in res)
            indep_boots += len(client.api.images(name="imagebuild-os/*"))
    add(f"cold, one imagebuild run ({len(variants)} variants, {len(plan.images)} images)", f"{shared_s:.0f}s",
        f"{shared_bases} base build(s), {boots} bootstrap(s)")
    add("cold, each variant on its own", f"{indep_s:.0f}s", f"{indep_bases} base builds, {indep_boots} bootstraps")
    add("ratio cold shared / independent", f"{shared_s / indep_s:.2f}")


# -- 3. size / floor -------------------------------------------------------------------------------------------
def installed(client, ref: str) -> dict:
    out = client.containers.run(ref, ["/opt/venv/bin/python", "-c", INSTALLED_SIZE], network_mode="none",
                                remove=True, entrypoint=[], user="root")
    return json.loads(out.decode().strip().splitlines()[-1])


def os_packages(client, ref: str) -> dict[str, int]:
    """dpkg's installed packages of `ref` -> Installed-Size in bytes (dpkg counts KiB)."""
    out = client.containers.run(ref, ["dpkg-query", "-W", "-f", "${Package} ${Installed-Size}\\n"],
                                network_mode="none", remove=True, entrypoint=[], user="root").decode()
    return {name: int(kib or 0) * 1024 for name, kib in (line.split(" ", 1) for line in out.splitlines() if line)}


def unpacked_size(client, ref: str) -> int:
    """The image's unpacked size, as the build report gives it (builder/describe.py): the classic store's `Size`;
    the containerd image store (dockerd 26.1) reports the compressed content there, its history the unpacked
    layers. Its compressed size over an unpacked floor read 0.595 for the GH200 runtime."""
    size = int(client.api.inspect_image(ref).get("Size") or 0)
    return max(size, sum(int(h.get("Size") or 0) for h in client.api.history(ref)))


def bench_size(client, refs: list[tuple[str, str | None]]) -> list[dict]:
    """Size vs floor per image; floor = parent + Python distributions + OS packages the image added over it
    (the runtime's torch.compile toolchain is an OS package set). Returns one row per image."""
    console.rule("runtime image size / package floor")
    rows = []
    for ref, parent in refs:
        size = unpacked_size(client, ref)
        pkgs, debs = installed(client, ref), os_packages(client, ref)
        if parent:
            psize = unpacked_size(client, parent)
            before, debs_before = installed(client, parent)["per"], os_packages(client, parent)
        else:
            psize, before, debs_before = 0, {}, {}
        added = sum(n for name, n in pkgs["per"].items() if name not in before)
        apt_added = sum(n for name, n in debs.items() if name not in debs_before)
        floor = psize + added + apt_added
        top = sorted(((n, name) for name, n in pkgs["per"].items() if name not in before), reverse=True)[:3]
        add(f"size {ref}", format_size(size), f"floor {format_size(floor)} = parent {format_size(psize)} "
            f"+ packages {format_size(added)} ({', '.join(f'{name} {format_size(n)}' for n, name in top)}) "
            f"+ OS packages {format_size(apt_added)}")
        add(f"ratio size / floor {ref.rsplit(':', 1)[-1]}", f"{size / floor:.3f}", "(goal <= 1.03)")
        rows.append({"ref": ref, "size": size, "floor": floor, "python": added, "os": apt_added})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matrix", default="images/cpu.yaml")
    ap.add_argument("--cold-matrix", default=None, help="2-variant matrix for the cold comparison")
    ap.add_argument("--registry", default="ibdev-build-bench")
    ap.add_argument("--wheelhouse", default=os.environ.get("PIP_FIND_LINKS") or
                    ("/opt/wheels" if Path("/opt/wheels").is_dir() else None))
    ap.add_argument("--ca-cert", action="append", default=None, help="repeatable (default: $PIP_CERT)")
    ap.add_argument("--torch-index-url", default="none")
    ap.add_argument("--log-dir", default=str(Path(tempfile.gettempdir()) / "ibbench-logs"))
    ap.add_argument("--skip-noop", action="store_true")
    ap.add_argument("--only", action="append", default=[], help="only these images (and their parents)")
    ap.add_argument("--quick", action="store_true", help="no cold comparison (CI: the bench must run)")
    ap.add_argument("--size-only", nargs="*", metavar="REF[=PARENT]",
                    help="measure these images; floor = PARENT size + packages added over PARENT (default: none)")
    args = ap.parse_args()
    args.ca_cert = args.ca_cert or [p for p in [os.environ.get("PIP_CERT")] if p]
    if args.quick:
        args.cold_matrix = None

    client = connect()
    if args.size_only:
        bench_size(client, [tuple(r.split("=", 1)) if "=" in r else (r, None) for r in args.size_only])
    else:
        plan = make_plan(args.matrix, args) if args.skip_noop else bench_noop(client, args)
        if args.cold_matrix:
            bench_cold(args)
        bench_size(client, [(i.tag, i.parent) for i in plan.images if i.flavor == "runtime"])
    table = Table(title="bench_build", title_justify="left")
    for col in ("measure", "value", "note"):
        table.add_column(col)
    for r in rows:
        table.add_row(*r)
    console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
