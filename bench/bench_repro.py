#!/usr/bin/env python3
"""Reproducibility across engines (a figure, not a test): build one matrix on two fresh private engines and compare
what came out, layer by layer. Prints a table:

  image | layer | created by | same on both | why not

"why not" is measured, not guessed: both images are read with `docker save` and every differing layer's tar members
are compared (type, mode, owner, mtime, size, content hash, link target): it names the paths whose mtime differs
(a build-time date), whose content differs, or that only one side has.

Usage (needs root for the engines and the bootstrap; a build of images/cpu.yaml takes minutes per engine):
  python bench/bench_repro.py --matrix images/cpu.yaml --wheelhouse /opt/wheels --ca-cert $PIP_CERT \\
      --torch-index-url none [--backend classic|buildkit] [--keep] [--markdown table.md]
  python bench/bench_repro.py --compare unix:///var/tmp/ibrA/docker.sock unix:///var/tmp/ibrB/docker.sock \\
      --report reportA/build-report.json      # compare two engines that already hold the build
  python bench/bench_repro.py --quick
      # CI: a two-file image built here (FROM scratch), compared with itself on the engine DOCKER_HOST names: every
      # row must say "same". It checks the saving, reading and comparing, not reproducibility, in seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from imagebuild.report.budget import describe_step  # noqa: E402

# the engine each backend's comparison runs on: Debian 12's dockerd 20.10 (classic builder) or trixie's dockerd 26.1
# with buildx (the BuildKit backend; its DOCKER_CONFIG holds the plugin)
ENGINES = {"classic": ROOT / "scripts" / "docker-engine.sh", "buildkit": ROOT / "scripts" / "modern-engine.sh"}


# -- engines and builds ----------------------------------------------------------------------------------------
def start_engine(directory: Path, backend: str = "classic") -> str:
    out = subprocess.run([str(ENGINES[backend]), "--fresh", str(directory)], check=True, capture_output=True,
                         text=True)
    return out.stdout.split("DOCKER_HOST=", 1)[1].split()[0]


def stop_engine(directory: Path, backend: str = "classic") -> None:
    subprocess.run([str(ENGINES[backend]), "--stop", str(directory)], check=False, capture_output=True)
    shutil.rmtree(directory, ignore_errors=True)


def build(host: str, args, work: Path) -> tuple[float, Path]:
    """`imagebuild build` of the matrix on the engine at `host`; (seconds, its build-report.json)."""
    cmd = [sys.executable, "-m", "imagebuild", "build", "--matrix", args.matrix, "--registry", args.registry,
           "--plain", "--log-dir", str(work / "logs"), "--report-dir", str(work / "report"), "--backend", args.backend]
    for name in ("wheelhouse", "ca_cert", "torch_index_url"):
        value = getattr(args, name)
        if value:
            cmd += [f"--{name.replace('_', '-')}", value]
    env = {**os.environ, "DOCKER_HOST": host, "PYTHONPATH": str(ROOT / "src"),
           "IMAGEBUILD_STATE_DIR": str(work / "state")}
    if args.backend == "buildkit":
        env["DOCKER_CONFIG"] = str(ROOT / ".tools" / "docker-config")  # where modern-engine.sh put buildx
    t0 = time.monotonic()
    with open(work / "build.out", "w") as out:
        rc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail = (work / "build.out").read_text(errors="replace").splitlines()[-20:]
        raise SystemExit(f"build on {host} failed (exit {rc}):\n" + "\n".join(tail))
    return time.monotonic() - t0, work / "report" / "build-report.json"


# -- reading saved images --------------------------------------------------------------------------------------
class _Hashing:
    """A read-only stream that hashes what passes through it (a layer's diff_id while its members are read)."""

    def __init__(self, raw):
        self.raw, self.h = raw, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.h.update(data)
        return data

    def drain(self) -> str:
        while self.read(1 << 20):
            pass
        return "sha256:" + self.h.hexdigest()


class _Stream:
    """The SDK's `get_image` chunks as a file object for tarfile's stream mode."""

    def __init__(self, chunks: Iterator[bytes]):
        self.chunks, self.buf = chunks, b""

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self.buf) < n:
            try:
                self.buf += next(self.chunks)
            except StopIteration:
                break
        if n < 0:
            n = len(self.buf)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def layer_entries(fileobj) -> dict[str, tuple]:
    """path -> (type, mode, uid, gid, mtime, size, content sha256 or link target, device, xattrs)."""
    entries: dict[str, tuple] = {}
    with tarfile.open(fileobj=fileobj, mode="r|") as tar:
        for m in tar:
            if m.isreg():
                f = tar.extractfile(m)
                h = hashlib.sha256()
                while f is not None and (block := f.read(1 << 20)):
                    h.update(block)
                what = h.hexdigest()[:16]
            else:
                what = m.linkname
            xattrs = tuple(sorted((k, v) for k, v in m.pax_headers.items() if k.startswith("SCHILY.xattr")))
            entries[m.name.lstrip("./") or "/"] = (m.type, m.mode, m.uid, m.gid, int(m.mtime), m.size, what,
                                                   (m.devmajor, m.devminor), xattrs)
    return entries


def saved_image(client, ref: str) -> tuple[dict, dict[str, dict[str, tuple]]]:
    """(config, diff_id -> entries) of an image, read from `docker save` as a stream."""
    config: dict = {}
    layers: dict[str, dict[str, tuple]] = {}
    with tarfile.open(fileobj=_Stream(iter(client.api.get_image(ref))), mode="r|") as outer:
        for m in outer:
            f = outer.extractfile(m) if m.isreg() else None
            if f is None:
                continue
            if m.name.endswith("layer.tar"):
                hashing = _Hashing(f)
                entries = layer_entries(hashing)
                layers[hashing.drain()] = entries
            elif m.name.endswith(".json") and m.name != "manifest.json" and "/" not in m.name:
                config = json.loads(f.read())
    return config, layers


# -- comparing -------------------------------------------------------------------------------------------------
FIELDS = ("type", "mode", "uid", "gid", "mtime", "size", "content", "device", "xattrs")


def _names(paths: list[str], n: int = 3) -> str:
    shown = ", ".join("/" + p.rstrip("/") for p in paths[:n])
    return shown + (f" (+{len(paths) - n})" if len(paths) > n else "")


def why_not(a: dict[str, tuple], b: dict[str, tuple]) -> str:
    """What differs between two layers' members, grouped: only-here, content, mtime-only, other metadata."""
    only_a = sorted(set(a) - set(b))
    only_b = sorted(set(b) - set(a))
    content, mtime, other = [], [], []
    for path in sorted(set(a) & set(b)):
        if a[path] == b[path]:
            continue
        diff = [f for f, x, y in zip(FIELDS, a[path], b[path], strict=True) if x != y]
        if "content" in diff or "size" in diff:
            content.append(path)
        elif diff == ["mtime"]:
            mtime.append(path)
        else:
            other.append(f"{path} ({'/'.join(diff)})")
    parts = []
    if mtime:
        parts.append(f"mtime (build time) on {len(mtime)}: {_names(mtime)}")
    if content:
        parts.append(f"content on {len(content)}: {_names(content)}")
    if other:
        parts.append(f"metadata on {len(other)}: {', '.join(other[:3])}")
    if only_a or only_b:
        parts.append(f"only on one engine: {_names(only_a + only_b)}")
    return "; ".join(parts) or "same members, different tar bytes (member order or header format)"


def compare(name: str, ref_a: str, ref_b: str, client_a, client_b) -> list[dict]:
    cfg_a, layers_a = saved_image(client_a, ref_a)
    cfg_b, layers_b = saved_image(client_b, ref_b)
    id_a = client_a.api.inspect_image(ref_a)["Id"]
    id_b = client_b.api.inspect_image(ref_b)["Id"]
    rows = [{"image": name, "layer": "ID", "step": f"image ID {id_a[7:19]} / {id_b[7:19]}", "same": id_a == id_b,
             "why": "" if id_a == id_b else _config_why(cfg_a, cfg_b)}]
    steps = [h.get("created_by", "") for h in cfg_a.get("history", []) if not h.get("empty_layer")]
    ids_a, ids_b = cfg_a["rootfs"]["diff_ids"], cfg_b["rootfs"]["diff_ids"]
    for n, (da, db) in enumerate(zip(ids_a, ids_b, strict=False)):
        same = da == db
        rows.append({"image": name, "layer": str(n), "step": describe_step(steps[n] if n < len(steps) else "", 70),
                     "same": same, "why": "" if same else why_not(layers_a[da], layers_b[db]),
                     "size": sum(e[5] for e in layers_a[da].values())})
    if len(ids_a) != len(ids_b):
        rows.append({"image": name, "layer": "-", "step": "layer count", "same": False,
                     "why": f"{len(ids_a)} vs {len(ids_b)} layers"})
    return rows


def _config_why(a: dict, b: dict) -> str:
    diff = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    if "config" in diff:
        la, lb = (a.get("config") or {}).get("Labels") or {}, (b.get("config") or {}).get("Labels") or {}
        labels = [k for k in sorted(set(la) | set(lb)) if la.get(k) != lb.get(k)]
        if labels:
            diff.append("labels " + ", ".join(labels))
    return "config differs: " + ", ".join(diff)


def markdown(rows: list[dict]) -> str:
    lines = ["| image | layer | created by | same on both | why not |", "|---|---|---|---|---|"]
    for r in rows:
        step = r["step"].replace("|", "\\|")
        size = f" ({r['size'] / 1e6:.1f} MB)" if r.get("size") else ""
        lines.append(f"| {r['image']} | {r['layer']} | `{step}`{size} | {'yes' if r['same'] else 'no'} | "
                     f"{r['why'].replace('|', '/')} |")
    return "\n".join(lines)


def images_of(report: Path) -> list[tuple[str, str]]:
    """(name, tag) of the OS image and every built image of a build-report.json, parents first."""
    doc = json.loads(report.read_text())
    rows = doc.get("images") or doc.get("results") or doc
    out = []
    for row in rows:
        out.append((f"{row['flavor']}", row["tag"]))
    return out


def os_images(client) -> dict[str, str]:
    """Bootstrap OS images on an engine: repository (imagebuild-os/<os>) -> tag. The tag carries the bootstrap
    inputs' hash, so two engines are paired by repository: a different tag is a finding, not a missing image."""
    found = {}
    for img in client.api.images():
        for tag in img.get("RepoTags") or []:
            if tag.startswith("imagebuild-os/"):
                found[tag.rsplit(":", 1)[0]] = tag
    return found


QUICK_TAG = "ibrepro-quick:latest"


def quick(docker) -> int:
    """--quick: build a two-file image, compare it with itself through the same code as a real run."""
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("Dockerfile", b"FROM scratch\nCOPY a.txt b.bin /data/\n"), ("a.txt", b"same\n"),
                           ("b.bin", bytes(range(256)) * 64)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    client = docker.from_env(timeout=300)
    try:
        client.images.build(fileobj=buf, custom_context=True, tag=QUICK_TAG, rm=True)
        rows = compare("quick (FROM scratch)", QUICK_TAG, QUICK_TAG, client, client)
        print(markdown(rows))
        if not all(r["same"] for r in rows):
            raise SystemExit("bench_repro --quick: an image compared with itself differs: the comparison is broken")
    finally:
        try:
            client.images.remove(QUICK_TAG, force=True)
        except docker.errors.APIError:
            pass
        client.close()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matrix", default=str(ROOT / "images" / "cpu.yaml"))
    ap.add_argument("--registry", default="ibrepro")
    ap.add_argument("--wheelhouse")
    ap.add_argument("--ca-cert")
    ap.add_argument("--torch-index-url")
    ap.add_argument("--backend", choices=sorted(ENGINES), default="classic",
                    help="classic: two fresh dockerd 20.10; buildkit: two fresh dockerd 26.1 with buildx")
    ap.add_argument("--work", default="/var/tmp", help="where the engines' data folders go (short paths)")
    ap.add_argument("--keep", action="store_true", help="leave both engines running (prints their DOCKER_HOSTs)")
    ap.add_argument("--compare", nargs=2, metavar="DOCKER_HOST", help="compare two engines that hold the build")
    ap.add_argument("--report", help="with --compare: engine A's build-report.json")
    ap.add_argument("--markdown", help="also write the table to this file")
    ap.add_argument("--quick", action="store_true", help="a tiny image compared with itself (CI)")
    args = ap.parse_args()
    import docker

    if args.quick:
        return quick(docker)

    dirs: list[Path] = []
    try:
        if args.compare:
            hosts, report = list(args.compare), Path(args.report)
        else:
            hosts, report, seconds = [], None, []
            for label in ("A", "B"):
                d = Path(tempfile.mkdtemp(prefix=f"ibr{label}-", dir=args.work))
                dirs.append(d)
                hosts.append(start_engine(d, args.backend))
                took, rep = build(hosts[-1], args, d)
                seconds.append(took)
                report = report or rep
                print(f"engine {label}: {hosts[-1]}: built in {took:.0f}s", file=sys.stderr)
        clients = [docker.DockerClient(base_url=h, timeout=900) for h in hosts]
        assert report is not None
        rows: list[dict] = []
        os_a, os_b = os_images(clients[0]), os_images(clients[1])
        for repo in sorted(set(os_a) & set(os_b)):
            rows += compare("os (bootstrap)", os_a[repo], os_b[repo], clients[0], clients[1])
        for name, tag in images_of(report):
            rows += compare(name, tag, tag, clients[0], clients[1])
        table = markdown(rows)
        print(table)
        if args.markdown:
            Path(args.markdown).write_text(table + "\n")
        for c in clients:
            c.close()
    finally:
        if args.keep:
            for d, h in zip(dirs, hosts if not args.compare else [], strict=False):
                print(f"kept: DOCKER_HOST={h} (stop: {ENGINES[args.backend]} --stop {d})", file=sys.stderr)
        else:
            for d in dirs:
                stop_engine(d, args.backend)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
