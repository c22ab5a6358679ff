"""Delivery bench (issue 24 item 4): what a node pulls and what a push sends, as pushed TODAY (the engine's own
`docker push`: gzip, Docker media types) and NOW (`imagebuild push`: skopeo, zstd level 3, OCI media types),
side by side in one run. Prints a Markdown table (not a test).

1. images/cpu.yaml's runtime is built on DOCKER_HOST (must be a dockerd >= 23: the nodes pull zstd);
2. it is pushed both ways to one local registry (scripts/registry.sh) through a byte-counting proxy
   (tests/integration/faultproxy.py, no faults): seconds and bytes each push sends;
3. a fresh node per way (scripts/modern-engine.sh --fresh: dockerd 26.1, containerd image store) pulls it cold:
   seconds and bytes the registry sent;
4. one pip package is added to the runtime (`six`), rebuilt, pushed both ways again; each node, which has the old
   image, pulls the new one: seconds and bytes.
`imagebuild push` starts with an empty compressed-layer cache of its own (push/compress.py): the first push
compresses every layer, the +1 package push only the layers that changed (as on a build machine that keeps it).
Every figure is read from the proxy (the registry side), not from the client.

    eval "$(scripts/modern-engine.sh --fresh /var/tmp/ib-bench-zstd)"
    python bench/bench_zstd.py --wheelhouse /opt/wheels --ca-cert $PIP_CERT
    python bench/bench_zstd.py --matrix tests/e2e/gh200-emulated.yaml --platform linux/amd64 --wheelhouse ''  # CUDA 13

--quick (CI: the bench must run, not measure): the base image only, and the change is one ENV line in a derived
image instead of a rebuild; still both pushes and both pulls on fresh nodes.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from faultproxy import FaultProxy  # noqa: E402  (a counting TCP proxy; no faults configured here)

MATRIX = ROOT / "images" / "cpu.yaml"
WHEELHOUSE = os.environ.get("IMAGEBUILD_WHEELHOUSE") or os.environ.get("PIP_FIND_LINKS") or "/opt/wheels"
CA = os.environ.get("IMAGEBUILD_CA_CERT") or os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"


def run(*argv: str, env: dict[str, str] | None = None, timeout: int = 3600) -> str:
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                         env={**os.environ, **(env or {})})
    if out.returncode != 0:
        sys.exit(f"{' '.join(argv[:3])} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return out.stdout


def imagebuild(*args: str, env: dict[str, str] | None = None) -> str:
    return run(sys.executable, "-m", "imagebuild", *args, env={"PYTHONPATH": str(ROOT / "src"), **(env or {})})


def shell_vars(text: str) -> dict[str, str]:
    return dict(w.removeprefix("export ").split("=", 1) for w in text.replace("\n", " ").split() if "=" in w)


class Node:
    """A fresh dockerd 26.1 (containerd image store): one cluster node."""

    def __init__(self, work: Path, name: str) -> None:
        self.dir = work / name
        out = run("bash", str(ROOT / "scripts" / "modern-engine.sh"), "--fresh", str(self.dir), timeout=600)
        self.env = {"DOCKER_HOST": shell_vars(out)["DOCKER_HOST"]}

    def pull(self, ref: str, proxy: FaultProxy) -> tuple[float, int]:
        proxy.reset_counters()
        t0 = time.monotonic()
        run("docker", "pull", "-q", ref, env=self.env)
        return time.monotonic() - t0, proxy.bytes_down

    def stop(self) -> None:
        subprocess.run(["bash", str(ROOT / "scripts" / "modern-engine.sh"), "--stop", str(self.dir)],
                       capture_output=True, check=False, timeout=120)
        subprocess.run(["rm", "-rf", str(self.dir)], check=False)


def push_today(tag: str, ref: str, proxy: FaultProxy) -> tuple[float, int]:
    """The engine's own push (main at c87c273 pushed this way): gzip layers."""
    run("docker", "tag", tag, ref)
    proxy.reset_counters()
    t0 = time.monotonic()
    run("docker", "push", "-q", ref)
    return time.monotonic() - t0, proxy.bytes_up


def push_now(matrix: Path, prefix: str, only: str, state: Path, proxy: FaultProxy) -> tuple[float, int]:
    proxy.reset_counters()
    t0 = time.monotonic()
    imagebuild("push", "--matrix", str(matrix), "--registry", prefix, "--only", only, "--untested",
               "--report-dir", str(state / "report-push"),
               env={"IMAGEBUILD_STATE_DIR": str(state), "IMAGEBUILD_LAYER_CACHE": str(state / "layer-cache")})
    return time.monotonic() - t0, proxy.bytes_up


def image_size(ref: str, proxy_registry: str) -> int:
    """The sum of the manifest's layer sizes (compressed) as the registry serves `ref`."""
    from imagebuild.oci import Reference, RegistryAuth, RegistryClient

    parsed = Reference.parse(ref)
    got = RegistryClient(RegistryAuth(proxy_registry)).manifest(parsed.repository, str(parsed.tag))
    assert got is not None, ref
    return sum(int(layer["size"]) for layer in got[1]["layers"])  # type: ignore[union-attr,index]


class Rows(list[tuple[str, str, str, str]]):
    """The table's rows; each also printed to stderr as soon as it is measured (a stopped run keeps its figures)."""

    def append(self, row: tuple[str, str, str, str]) -> None:
        print("measured: " + " | ".join(row), file=sys.stderr, flush=True)
        super().append(row)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="base image only (CI: the bench must run)")
    ap.add_argument("--matrix", type=Path, default=MATRIX, help="the matrix (default images/cpu.yaml; make e2e-cuda: a "
                    "CUDA one)")
    ap.add_argument("--only", default="", help="with several runtimes in the matrix, the one whose tag holds this "
                    "text (e.g. a platform: 'debian12-runtime' for the amd64 one)")
    ap.add_argument("--platform", default="", help="build and push only this platform of a multi-platform matrix "
                    "(linux/amd64): push publishes a tag's index only with every platform of it, so one platform of "
                    "two is refused, as it should be")
    ap.add_argument("--add-package", default="six", help="the pip package the +1 rows add to the runtime")
    ap.add_argument("--wheelhouse", default=WHEELHOUSE)
    ap.add_argument("--ca-cert", default=CA)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    work = Path(tempfile.mkdtemp(prefix="ib-bench-zstd-", dir="/var/tmp"))
    reg = shell_vars(run("bash", str(ROOT / "scripts" / "registry.sh"), "--quiet", "--dir", str(work / "registry")))
    host, port = reg["REGISTRY"].split(":")
    nodes: list[Node] = []
    rows = Rows()
    try:
        with FaultProxy((host, int(port))) as proxy:
            prefix = f"{proxy.address}/bench-{secrets.token_hex(3)}"
            state = work / "state"
            flavor = "base" if args.quick else "runtime"
            only = args.only or flavor
            # a CPU matrix takes torch from the wheelhouse (CI's); a CUDA one from PyPI (--wheelhouse ''): the
            # wheelhouse's CPU torch of the same version would stand in for it
            local = ("--wheelhouse", args.wheelhouse, "--torch-index-url", "none") if args.wheelhouse else ()
            build = ("--matrix", "M", "--registry", prefix, "--only", only, *local,
                     "--ca-cert", args.ca_cert, "--plain", "--no-registry-cache",
                     "--no-sbom", "--report-dir", str(state / "report"))

            def build_matrix(matrix: Path) -> str:
                imagebuild("build", *(a if a != "M" else str(matrix) for a in build),
                           env={"IMAGEBUILD_STATE_DIR": str(state)})
                plan = imagebuild("plan", "--matrix", str(matrix), "--registry", prefix,
                                  "--json", env={"IMAGEBUILD_STATE_DIR": str(state)})
                import json

                return str(next(i["tag"] for i in json.loads(plan)
                                if i["flavor"] == flavor and (not args.only or args.only in i["tag"])))

            first = work / "matrix.yaml"
            first.write_text(one_platform(args.matrix.read_text(), args.platform) if args.platform
                             else args.matrix.read_text())
            tag = build_matrix(first)
            today_ref = tag.replace(prefix, prefix + "-today", 1)
            t_s, t_b = push_today(tag, today_ref, proxy)
            n_s, n_b = push_now(first, prefix, only, state, proxy)
            size_today, size_now = image_size(today_ref, proxy.address), image_size(tag, proxy.address)
            rows.append(("push, first (s / MB sent)", f"{t_s:.1f} / {t_b / 1e6:.1f}", f"{n_s:.1f} / {n_b / 1e6:.1f}",
                         f"{n_s / t_s:.2f}x / {n_b / max(t_b, 1):.2f}x"))
            rows.append(("image, compressed (MB)", f"{size_today / 1e6:.1f}", f"{size_now / 1e6:.1f}",
                         f"{size_now / size_today:.2f}x"))
            nodes = [Node(work, "node-today"), Node(work, "node-now")]
            (ct_s, ct_b), (cn_s, cn_b) = nodes[0].pull(today_ref, proxy), nodes[1].pull(tag, proxy)
            rows.append(("cold pull on a fresh dockerd 26.1 (s / MB)", f"{ct_s:.1f} / {ct_b / 1e6:.1f}",
                         f"{cn_s:.1f} / {cn_b / 1e6:.1f}", f"**{cn_s / ct_s:.2f}x** (≤ 0.7x) / {cn_b / ct_b:.2f}x"))

            if args.quick:  # the base has no pip packages of the matrix: no one-package change to measure
                return print_table(rows, f"{args.matrix.name} base (--quick: no +1 package rows)")
            changed = work / "matrix-plus-one.yaml"
            changed.write_text(with_package(first.read_text(), args.add_package))
            tag2 = build_matrix(changed)
            today2 = tag2.replace(prefix, prefix + "-today", 1)
            t2_s, t2_b = push_today(tag2, today2, proxy)
            n2_s, n2_b = push_now(changed, prefix, only, state, proxy)
            rows.append(("+1 pip package: push (s / MB sent)", f"{t2_s:.1f} / {mb(t2_b)}", f"{n2_s:.1f} / {mb(n2_b)}",
                         f"sent {t2_b / size_today:.2%} / {n2_b / size_now:.2%} of the image (goal ≤ 10%)"))
            (p_t, pb_t), (p_n, pb_n) = nodes[0].pull(today2, proxy), nodes[1].pull(tag2, proxy)
            rows.append(("+1 pip package: a node with the old image pulls (s / MB)", f"{p_t:.1f} / {mb(pb_t)}",
                         f"{p_n:.1f} / {mb(pb_n)}",
                         f"pulled {pb_t / size_today:.2%} / {pb_n / size_now:.2%} of the image (goal ≤ 5%)"))
    finally:
        for node in nodes:
            node.stop()
        subprocess.run(["bash", str(ROOT / "scripts" / "registry.sh"), "--stop", "--dir", str(work / "registry")],
                       capture_output=True, check=False, timeout=60)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    return print_table(rows, f"{args.matrix.name} runtime" + (f" ({args.only})" if args.only else ""))


def one_platform(matrix_text: str, platform: str) -> str:
    """The matrix with `platform` as its only one (defaults.platforms; rows that name their own keep theirs)."""
    import yaml

    doc = yaml.safe_load(matrix_text)
    doc.setdefault("defaults", {})["platforms"] = [platform]
    return yaml.safe_dump(doc, sort_keys=False)


def with_package(matrix_text: str, package: str) -> str:
    """The matrix with one pip package more for the runtime (defaults.pip_packages.runtime)."""
    import yaml

    doc = yaml.safe_load(matrix_text)
    packages = doc.setdefault("defaults", {}).setdefault("pip_packages", {})
    packages["runtime"] = [*packages.get("runtime", []), package]
    return yaml.safe_dump(doc, sort_keys=False)


def mb(n: int) -> str:
    """Bytes as MB, with the precision a small figure needs (a one-package layer is a few kB)."""
    return f"{n / 1e6:.1f}" if n >= 1e6 else f"{n / 1e6:.3f} ({n:,} B)"


def print_table(rows: list[tuple[str, str, str, str]], what: str) -> int:
    print(f"| {what} | today: docker push (gzip) | now: imagebuild push (zstd) | now/today |")
    print("|---|---:|---:|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
