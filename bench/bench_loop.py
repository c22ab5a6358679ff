"""The incremental loop (issue 44), side by side with a baseline commit in one run. Prints Markdown tables (not a test).

For each side (BASELINE: the tree of `--baseline REF`, checked out into a temporary worktree; NOW: this tree), on a
fresh private dockerd 26.1 (containerd image store) and local registries of its own (scripts/registry.sh):

1. cold: `imagebuild build --test` of the matrix selection (default: the runtime and the base it needs); the
   runtime's phase table from build-report.json;
2. the first push: `imagebuild push --sign-key` (cosign, SBOM + provenance attestations) against the engine's own
   unsigned `docker push` of the same images to another registry, as empty (goal: ≤ 1.5x); `--push-runs N`: both N
   times, the registries emptied between runs (and skopeo's blob-info cache removed), the medians in the table and
   each run beside them;
3. a fresh node (bench_pull.Node: another private dockerd 26.1 on an ext4 of its own) pulls the runtime cold, the
   host's writes synced first; on that node, the floor of that pull (bench_pull.py: the registry read of the same
   blobs and an untar of the uncompressed layers into an empty directory; goal: pull ≤ 1.3x read + untar), what a
   pull does beyond that floor, and from the node's debug log when its layers began to apply and how long the
   applies took, one after another. `--pull-runs N`: N fresh nodes, the medians in the table and each run's pull
   beside them. NOW also measures the same for the runtime flattened into one gzip layer (`docker export | docker
   import`, pushed by the engine): the old single-layer form;
4. the loop: one pip package added to the matrix (`--add-package`, default six), then each phase timed: `build`,
   `test`, signed `push`, and on the node that holds the previous tag, `docker pull` of the new one and
   `docker run --rm TAG python -c 'import torch'` (goals: the rebuild ≤ 0.3x the runtime's cold build; the whole loop
   ≤ 60 s).

    python bench/bench_loop.py --baseline 463f54f --wheelhouse /opt/wheels --ca-cert $PIP_CERT
    python bench/bench_loop.py --quick      # CI: NOW only, the base, the loop's change one ENV line
    python bench/bench_loop.py --baseline none --matrix tests/e2e/cu130-dev-debian12.yaml --wheelhouse '' \
        --no-flat --keep-reports reports/e2e-loop-cuda     # the CUDA runtime (make e2e-loop-cuda), its reports kept

--quick (make test-all's bench-quick: the bench must run, not measure): NOW only, `--only base`, and the change is the
base's apt packages (one more: less) instead of a pip package; the floor and the single-layer rows are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_pull import Node, pull_and_floor, pull_rows  # noqa: E402  (the node, its pull and that pull's floor)

WHEELHOUSE = os.environ.get("IMAGEBUILD_WHEELHOUSE") or os.environ.get("PIP_FIND_LINKS") or "/opt/wheels"
# the bench's signing key's password: none of its folders' names holds it (a run masks its secrets in what it writes)
KEY_PASSWORD = secrets.token_urlsafe(12)
# where skopeo (containers/image, as root) remembers which registry and repository holds each blob it pushed
BLOB_INFO_CACHE = "/var/lib/containers/cache/blob-info-cache-v1.boltdb"
CA = os.environ.get("IMAGEBUILD_CA_CERT") or os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
ACCEPT = ", ".join(("application/vnd.oci.image.manifest.v1+json",
                    "application/vnd.docker.distribution.manifest.v2+json"))


def run(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: int = 3600) -> str:
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd,
                         env={**os.environ, **(env or {})})
    if out.returncode != 0:
        sys.exit(f"{' '.join(argv[:4])} failed (rc {out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out.stdout


def timed(fn: Any, *args: Any, **kwargs: Any) -> float:
    start = time.monotonic()
    fn(*args, **kwargs)
    return time.monotonic() - start


def shell_vars(text: str) -> dict[str, str]:
    return dict(w.removeprefix("export ").split("=", 1) for w in text.replace("\n", " ").split() if "=" in w)


class Engine:
    """A fresh private dockerd 26.1 under `folder`: the build machine (the node is bench_pull.Node)."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder
        folder.mkdir(parents=True, exist_ok=True)
        out = run("bash", str(ROOT / "scripts" / "modern-engine.sh"), "--fresh", str(folder / "engine"), timeout=600)
        self.env = {"DOCKER_HOST": shell_vars(out)["DOCKER_HOST"], "DOCKER_CONFIG": shell_vars(out)["DOCKER_CONFIG"]}

    def docker(self, *args: str, timeout: int = 3600) -> str:
        return run("docker", *args, env=self.env, timeout=timeout)

    def stop(self) -> None:
        subprocess.run(["bash", str(ROOT / "scripts" / "modern-engine.sh"), "--stop", str(self.dir / "engine")],
                       capture_output=True, check=False, timeout=180)
        subprocess.run(["rm", "-rf", str(self.dir)], check=False)


class Side:
    """One tree's run of the loop (module doc): its engine, state, layer cache and registry repositories."""

    def __init__(self, name: str, tree: Path, work: Path, key: Path, args: argparse.Namespace) -> None:
        self.name, self.tree, self.args, self.key = name, tree, args, key
        self.work = work / name
        self.work.mkdir(parents=True)
        # a registry of its own for each side and another for the engine's own push: neither first push may find the
        # blobs another put there (skopeo's blob-info cache mounts a blob from any repository of a registry it
        # pushed to before; round 21's second side pushed nothing)
        self.registries = [self.work / "registry", self.work / "registry-docker"]
        self.engine: Engine | None = None
        self.node: Node | None = None
        try:  # what started is stopped again when the rest does not start
            registry, self.docker_registry = (start_registry(d) for d in self.registries)
            self.prefix = f"{registry}/loop-{name}-{secrets.token_hex(3)}"
            self.engine = Engine(self.work / "engine")
        except BaseException:
            self.stop()
            raise
        self.env = {**self.engine.env, "PYTHONPATH": str(tree / "src"), "IMAGEBUILD_STATE_DIR": str(self.work / "state"),
                    "IMAGEBUILD_LAYER_CACHE": str(self.work / "layer-cache"), "COSIGN_PASSWORD": KEY_PASSWORD,
                    "IMAGEBUILD_PUSH_TMP": str(self.work),
                    # a baseline worktree has no .tools/ of its own: this checkout's cosign signs for both sides
                    "IMAGEBUILD_COSIGN": str(ROOT / ".tools" / "bin" / "cosign")}
        self.rows: dict[str, float | str] = {}

    def empty_registries(self) -> None:
        """Both registries stopped, their storage removed, started again on the same ports (the tags name the
        registry: the plan's IDs stay the same), and skopeo's blob-info cache removed, so that no push finds a blob
        where an earlier run put it (the engine keeps no blob locations across registries it never pushed to)."""
        for folder, registry in zip(self.registries, (self.prefix.split("/")[0], self.docker_registry), strict=True):
            stop_registry(folder)
            start_registry(folder, port=registry.rsplit(":", 1)[1])
        Path(BLOB_INFO_CACHE).unlink(missing_ok=True)

    def ib(self, *args: str) -> str:
        return run(sys.executable, "-m", "imagebuild", *args, env=self.env, cwd=self.tree)

    def selection(self) -> tuple[str, ...]:
        local = ("--wheelhouse", self.args.wheelhouse, "--torch-index-url", "none") if self.args.wheelhouse else ()
        return ("--only", self.args.only, *local, "--ca-cert", self.args.ca_cert)

    def tag(self, matrix: Path, flavor: str) -> str:
        plan = json.loads(self.ib("plan", "--matrix", str(matrix), "--registry", self.prefix, "--json"))
        return next(str(i["tag"]) for i in plan if i["flavor"] == flavor)

    def tags(self, matrix: Path) -> list[str]:
        """The tags `push --only` pushes (the selection itself; build also builds the parents it needs)."""
        plan = json.loads(self.ib("plan", "--matrix", str(matrix), "--registry", self.prefix, "--json"))
        return [str(i["tag"]) for i in plan if self.args.only in (i["flavor"], i["tag"])]

    def build(self, matrix: Path, report: str, test: bool) -> dict[str, Any]:
        self.ib("build", "--matrix", str(matrix), "--registry", self.prefix, *self.selection(), "--plain",
                "--no-registry-cache", "--report-dir", str(self.work / report), *(("--test",) if test else ()))
        return json.loads((self.work / report / "build-report.json").read_text())

    def push(self, matrix: Path, report: str) -> None:
        self.ib("push", "--matrix", str(matrix), "--registry", self.prefix, "--only", self.args.only,
                "--sign-key", str(self.key), "--report-dir", str(self.work / report))

    def docker_push(self, tags: list[str]) -> float:
        """The engine's own unsigned push of the same images to another registry, empty as the signed push's was
        (tagged first, not timed)."""
        refs = []
        for tag in tags:
            ref = tag.replace(self.prefix.split("/")[0], self.docker_registry, 1)
            self.engine.docker("tag", tag, ref)
            refs.append(ref)
        return sum(timed(self.engine.docker, "push", "-q", ref) for ref in refs)

    def stop(self) -> None:
        for engine in (self.engine, self.node):
            if engine is not None:
                engine.stop()
        for folder in self.registries:
            stop_registry(folder)


def start_registry(folder: Path, port: str = "0") -> str:
    return shell_vars(run("bash", str(ROOT / "scripts" / "registry.sh"), "--quiet", "--dir", str(folder),
                          "--port", port))["REGISTRY"]


def stop_registry(folder: Path) -> None:
    subprocess.run(["bash", str(ROOT / "scripts" / "registry.sh"), "--stop", "--dir", str(folder)],
                   capture_output=True, check=False, timeout=60)


def row_of(report: dict[str, Any], flavor: str) -> dict[str, Any]:
    return next(r for r in report["images"] if r.get("flavor") == flavor and r.get("status") == "built")


def phase_sums(row: dict[str, Any]) -> dict[str, float]:
    sums: dict[str, float] = {}
    for phase in row.get("phases") or []:
        sums[phase["kind"]] = sums.get(phase["kind"], 0.0) + float(phase["seconds"])
    return sums


def with_change(matrix_text: str, package: str, quick: bool) -> str:
    if quick:  # the base has no pip packages of the matrix: one Debian package more
        return matrix_text.replace("defaults:\n", "defaults:\n  apt_packages: {base: [less]}\n", 1)
    new, count = re.subn(r"runtime: \[([^\]]*)\]", lambda m: f"runtime: [{m.group(1)}, {package}]", matrix_text,
                         count=1)
    if count:
        return new
    if "pip_packages:" in matrix_text or "defaults:\n" not in matrix_text:
        sys.exit("the matrix's pip_packages have no `runtime: [...]` line to add a package to")
    return matrix_text.replace("defaults:\n", f"defaults:\n  pip_packages: {{runtime: [{package}]}}\n", 1)


def one_side(side: Side, matrix: Path, changed: Path, flavor: str) -> None:
    rows = side.rows
    cold = side.build(matrix, "report-cold", test=True)
    cold_row = row_of(cold, flavor)
    rows["cold build of the image (s)"] = float(cold_row["build_seconds"])
    for kind, seconds in sorted(phase_sums(cold_row).items()):
        rows[f"cold: {kind} (s)"] = seconds
    signed, unsigned = [], []
    tags = side.tags(matrix)
    for n in range(side.args.push_runs):  # each run into empty registries
        if n:
            side.empty_registries()
        signed.append(timed(side.push, matrix, f"report-push-{n}"))
        unsigned.append(side.docker_push(tags))
    rows["first push, signed: imagebuild push --sign-key (s)"] = statistics.median(signed)
    rows["first push, unsigned: docker push (s)"] = statistics.median(unsigned)
    if len(signed) > 1:
        rows["first push, each run: signed / docker push (s)"] = " ".join(
            f"{a:.2f}/{b:.2f}" for a, b in zip(signed, unsigned, strict=True))
    tag = side.tag(matrix, flavor)
    measured = []
    for n in range(side.args.pull_runs):  # each a fresh node; the last one stays for the loop
        if side.node is not None:
            side.node.stop()
        side.node = Node(side.work / f"node{n}")
        measured.append(pull_and_floor(side.node, tag))  # the floor on the node's disk
        print(f"measured {side.name} node {n + 1}: {json.dumps(measured[-1])}", file=sys.stderr, flush=True)
    rows.update(pull_rows(measured))
    if side.name == "now" and side.args.flat:  # the old single-layer form, pushed by the engine (gzip), for its ratio
        flat = tag.replace(side.prefix, side.prefix + "-flat", 1)
        cid = side.engine.docker("create", tag).strip()
        run("bash", "-c", f"docker export {cid} | docker import - {flat} >/dev/null", env=side.engine.env)
        side.engine.docker("rm", cid)
        side.engine.docker("push", "-q", flat)
        flat_floor = pull_and_floor(side.node, flat)
        rows["single gzip layer: cold pull (s)"] = flat_floor["pull"]
        rows["single gzip layer: floor read + untar (s)"] = flat_floor["read"] + flat_floor["untar"]
    # the loop: one package added, each phase timed
    started = time.monotonic()
    report = {}

    def build() -> None:
        report.update(side.build(changed, "report-loop", test=False))

    rows["loop: build (s)"] = timed(build)
    loop_row = row_of(report, flavor)
    for kind, seconds in sorted(phase_sums(loop_row).items()):
        rows[f"loop build: {kind} (s)"] = seconds
    rows["loop: test (s)"] = timed(side.ib, "test", "--matrix", str(changed), "--only", side.args.only,
                                   "--report-dir", str(side.work / "report-test"))
    rows["loop: push, signed (s)"] = timed(side.push, changed, "report-push-loop")
    new_tag = side.tag(changed, flavor)
    rows["loop: the node pulls (s)"] = timed(side.node.docker, "pull", "-q", new_tag)
    probe = "import sys" if side.args.quick else "import torch"  # the base has no torch
    rows["loop: the node starts it, import torch (s)"] = timed(
        side.node.docker, "run", "--rm", "--network", "none", new_tag, "python3", "-c", probe)
    rows["loop: total (s)"] = time.monotonic() - started


def print_tables(sides: list[Side]) -> None:
    names = [s.name for s in sides]
    keys = list(dict.fromkeys(k for s in sides for k in s.rows))
    print(f"| phase | {' | '.join(names)} |" + (" now/baseline |" if len(sides) == 2 else ""))
    print("|---|" + "---:|" * len(sides) + ("---|" if len(sides) == 2 else ""))
    for key in keys:
        cells = [s.rows.get(key) for s in sides]
        text = [f"{c:.1f}" if isinstance(c, float) else ("–" if c is None else str(c)) for c in cells]
        ratio = ""
        if len(sides) == 2:
            a, b = cells
            ratio = f" {b / a:.2f}x |" if isinstance(a, float) and isinstance(b, float) and a > 0 else " |"
        print(f"| {key} | {' | '.join(text)} |{ratio}")
    print()
    for side in sides:
        r = side.rows
        print(f"{side.name}: rebuild/cold {r['loop: build (s)'] / r['cold build of the image (s)']:.2f}x (≤ 0.3x); "
              f"first signed push / docker push {r['first push, signed: imagebuild push --sign-key (s)'] / max(r['first push, unsigned: docker push (s)'], 0.01):.2f}x (≤ 1.5x); "  # noqa: E501
              f"pull/floor {r['cold pull (s)'] / (r['pull floor: registry read (s)'] + r['pull floor: untar (s)']):.2f}x (≤ 1.3x)"  # noqa: E501
              f" ({r['cold pull (s)'] / (r['pull floor: registry read (s)'] + r['pull floor: untar, its writes not yet synced (s)']):.2f}x of the floor not waiting for its sync)"  # noqa: E501
              + (f", single gzip layer {r['single gzip layer: cold pull (s)'] / r['single gzip layer: floor read + untar (s)']:.2f}x"  # noqa: E501
                 if "single gzip layer: cold pull (s)" in r else "")
              + f"; loop total {r['loop: total (s)']:.1f} s (≤ 60 s)")
        beyond = ("inflate the layers on one core", "sha256 of each blob and each layer's tar, one core",
                  "the compressed blobs stored and synced")
        work = sum(r.get(f"pull, beyond the floor: {k} (s)", 0.0) for k in beyond)
        floor = r["pull floor: registry read (s)"] + r["pull floor: untar, its writes not yet synced (s)"]
        print(f"{side.name}: the pull's work one step after another on one core (the unsynced floor + inflate + "
              f"sha256 + store) {floor + work:.1f} s; the pull {r['cold pull (s)']:.1f} s "
              f"({r['cold pull (s)'] / (floor + work):.2f}x of that work)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", help="the commit to compare with (e.g. the main a change started from), or 'none'")
    ap.add_argument("--matrix", type=Path, default=ROOT / "images" / "cpu.yaml")
    ap.add_argument("--only", default="runtime", help="the images built and pushed (default: the runtime and its base)")
    ap.add_argument("--add-package", default="six")
    ap.add_argument("--wheelhouse", default=WHEELHOUSE, help="'' for a CUDA matrix (torch from PyPI)")
    ap.add_argument("--ca-cert", default=CA)
    ap.add_argument("--quick", action="store_true", help="NOW only, the base; the change one env entry (CI)")
    ap.add_argument("--no-flat", dest="flat", action="store_false",
                    help="skip the single gzip layer rows (a CUDA runtime flattened is ~25 GB more on disk)")
    ap.add_argument("--push-runs", type=int, default=1, metavar="N",
                    help="the first signed push and `docker push` N times, the registries emptied between runs "
                         "(the rows give the medians, and each run)")
    ap.add_argument("--pull-runs", type=int, default=1, metavar="N",
                    help="the cold pull on N fresh nodes, each with its floor (the rows give the medians, and each "
                         "run's pull)")
    ap.add_argument("--keep-reports", type=Path, metavar="DIR",
                    help="copy each side's cold build report (its smoke results: coverage, NCCL) to DIR/<side>/")
    args = ap.parse_args()
    if args.quick:
        args.only, args.baseline = "base", "none"
    elif not args.baseline:
        ap.error("--baseline REF (or 'none') is required without --quick")
    flavor = "base" if args.quick else "runtime"
    work = Path(tempfile.mkdtemp(prefix="ib-bench-loop-", dir="/var/tmp"))
    cosign = str(ROOT / ".tools" / "bin" / "cosign")
    run(cosign, "generate-key-pair", "--output-key-prefix", str(work / "cosign"), env={"COSIGN_PASSWORD": KEY_PASSWORD})
    matrix, changed = work / "matrix.yaml", work / "matrix-changed.yaml"
    matrix.write_text(args.matrix.read_text())
    changed.write_text(with_change(matrix.read_text(), args.add_package, args.quick))
    trees: list[tuple[str, Path]] = []
    if args.baseline != "none":
        run("git", "-C", str(ROOT), "worktree", "add", "--detach", str(work / "baseline-tree"), args.baseline)
        trees.append(("baseline", work / "baseline-tree"))
    trees.append(("now", ROOT))
    sides: list[Side] = []
    try:
        for name, tree in trees:
            side = Side(name, tree, work, work / "cosign.key", args)
            sides.append(side)
            try:
                one_side(side, matrix, changed, flavor)
            finally:
                side.stop()
                if args.keep_reports is not None and (work / name / "report-cold").is_dir():
                    shutil.copytree(work / name / "report-cold", args.keep_reports / name, dirs_exist_ok=True)
                print(f"measured {name}: {json.dumps(side.rows)}", file=sys.stderr, flush=True)
    finally:
        if args.baseline != "none":
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(work / "baseline-tree")],
                           capture_output=True, check=False)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    print_tables(sides)
    return 0


if __name__ == "__main__":
    sys.exit(main())
