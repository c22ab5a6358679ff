"""Push benchmark on the real CPU matrix (prints a table; not a test).

1. build images/cpu.yaml, push it to a local Distribution registry through a pass-through proxy that counts the
   bytes on the wire;
2. change the runtime template only (one ENV line), rebuild (base stays up to date; runtime and dev rebuild), push
   again and count the bytes: they should be about the changed layers only.

Needs a Docker engine (DOCKER_HOST or the default socket) and Debian's docker-registry; uses --wheelhouse
(PIP_FIND_LINKS, default /opt/wheels) and --ca-cert (PIP_CERT) like `make build-cpu`.

--quick (CI: the bench must run, not measure): the base image only (`--only base`, which scripts/bench-quick.sh has
built already, so the first build is a no-op), and the change is one ENV line in the base template.
"""

from __future__ import annotations

import argparse
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


def imagebuild(work: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(work / "src")}
    out = subprocess.run([sys.executable, "-m", "imagebuild", *args], cwd=work, env=env, capture_output=True,
                         text=True, timeout=3600)
    if out.returncode != 0:
        sys.exit(f"imagebuild {' '.join(args[:1])} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the base image only, a base-template change (CI)")
    args = ap.parse_args()
    only = ["--only", "base"] if args.quick else []
    changed = "base" if args.quick else "runtime"
    work = Path(tempfile.mkdtemp(prefix="ib-bench-push-"))
    for part in ("src", "templates", "images"):
        shutil.copytree(ROOT / part, work / part)
    reg = subprocess.run(["bash", str(ROOT / "scripts" / "registry.sh"), "--quiet"], capture_output=True, text=True,
                         check=True)
    info = dict(line.split("=", 1) for line in reg.stdout.split() if "=" in line)
    host, port = info["REGISTRY"].split(":")
    rows = []
    try:
        with FaultProxy((host, int(port))) as proxy:
            prefix = f"{proxy.address}/bench{secrets.token_hex(3)}"
            common = ["--matrix", "images/cpu.yaml", "--registry", prefix, *only]
            build = [*common, "--wheelhouse", WHEELHOUSE, "--ca-cert", CA, "--torch-index-url", "none", "--plain"]
            imagebuild(work, "build", *build)
            for label in (f"first push (CPU matrix{', base only' if only else ''})", "second push, unchanged"):
                proxy.reset_counters()
                t0 = time.monotonic()
                imagebuild(work, "push", *common, "--untested")
                rows.append((label, time.monotonic() - t0, proxy.bytes_up))

            template = work / "templates" / f"{changed}.Dockerfile.j2"
            template.write_text(template.read_text() + "\nENV IMAGEBUILD_BENCH_EDIT=1\n")
            t0 = time.monotonic()
            out = imagebuild(work, "build", *build)
            rebuild = time.monotonic() - t0
            proxy.reset_counters()
            t0 = time.monotonic()
            imagebuild(work, "push", *common, "--untested")
            rows.append((f"push after a {changed}-template change", time.monotonic() - t0, proxy.bytes_up))
            summary = out.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run(["bash", str(ROOT / "scripts" / "registry.sh"), "--stop", "--dir", info["REGISTRY_DIR"]],
                       check=False)
        shutil.rmtree(work, ignore_errors=True)

    print(f"{'push':40} {'seconds':>8} {'MB sent':>10}")
    for label, seconds, sent in rows:
        print(f"{label:40} {seconds:8.1f} {sent / 1e6:10.1f}")
    print(f"rebuild after the template change: {rebuild:.1f} s ({summary})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
