"""A node's cold pull of one image against the pull's floor (issue 44, goal 3), node settings side by side in one run.
Prints a Markdown table (not a test).

Each run is a fresh node: a private dockerd 26.1 (containerd image store) on a fresh ext4 of its own, loop-mounted
(bench_loop's reasons: a node unpacking where the last one's files were just removed pays ext4's inode allocator), the
host's writes synced before the pull starts (the floor's untar starts synced too). The node runs with `--debug`, so
its containerd logs each layer's apply ("diff applied", with its duration): the table shows when the first layer
began to apply and how long the applies took one after another, which is where a pull spends what its floor does not.

The floor, on the same node's disk: the registry read of the same blobs (HTTP GETs, nothing written) and an untar of
the uncompressed layers into an empty directory, synced (goal: pull ≤ 1.3x read + untar); beside it what a pull does
beyond that floor, each on one core: inflating the layers, their sha256 (the blob's digest and the tar's diff ID), and
the compressed blobs stored and synced (containerd's content store).

Settings (--setting, repeatable; default: all four):
  engine       the engine as `scripts/modern-engine.sh install` puts it: trixie's dockerd 26.1.5 with the containerd
               1.7.24 it is built against, default settings
  downloads-1  the same with `--max-concurrent-downloads 1`: the layers fetched one at a time, in order, so the first
               one is whole (and can be applied) before the rest share the disk with it
  containerd-1.6  bookworm's containerd 1.6.20 (/usr/bin/containerd) under the same dockerd: what the project's engine
               ran before round 24 (Go 1.19: sha256 without the CPU's SHA extensions)
  overlay2     the engine without the containerd image store: dockerd's own layer store on the overlay2 graph driver
               (Docker's default before 29.0): dockerd fetches each blob to a temporary file and untars it itself

    python bench/bench_pull.py 127.0.0.1:5000/repo:tag --runs 3
    python bench/bench_pull.py REF1 REF2 --setting engine --runs 2   # two images side by side, runs interleaved
    python bench/bench_pull.py --quick      # CI: a two-layer image of its own in a registry of its own, one run each

Needs root (mount), `make install` (the engine), Debian's docker CLI and docker-registry.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import hashlib
import http.client
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import zstandard

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from imagebuild.files import sha256_file  # noqa: E402

ENGINE = ROOT / ".tools" / "docker-26.1.5"
ACCEPT = ", ".join(("application/vnd.oci.image.manifest.v1+json",
                    "application/vnd.docker.distribution.manifest.v2+json"))
SETTINGS = {  # name -> (the folder whose containerd the node runs, dockerd flags, containerd image store)
    "engine": (ENGINE / "usr" / "bin", (), True),
    "downloads-1": (ENGINE / "usr" / "bin", ("--max-concurrent-downloads", "1"), True),
    "containerd-1.6": (Path("/usr/bin"), (), True),
    "overlay2": (ENGINE / "usr" / "bin", (), False),
}
SECONDS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}


def run(*argv: str, env: dict[str, str] | None = None, timeout: int = 3600) -> str:
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                         env={**os.environ, **(env or {})})
    if out.returncode != 0:
        sys.exit(f"{' '.join(argv[:4])} failed (rc {out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out.stdout


def own_disk(folder: Path) -> Path | None:
    """A fresh sparse ext4 image mounted on `folder` (its path), or None with a line saying why not."""
    image = folder.with_name(folder.name + ".ext4")
    try:
        with image.open("wb") as fh:
            fh.truncate(64 << 30)
        for argv in (["mkfs.ext4", "-q", "-F", str(image)], ["mount", "-o", "loop", str(image), str(folder)]):
            done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
            if done.returncode != 0:
                raise OSError(f"{argv[0]}: {done.stderr.strip()[-200:]}")
    except OSError as exc:
        image.unlink(missing_ok=True)
        print(f"node: on the work folder's filesystem, not a fresh one of its own ({exc})", file=sys.stderr)
        return None
    return image


class Node:
    """A fresh node: a private dockerd 26.1 (trixie's, scripts/docker-engine.sh's life cycle) on an ext4 of its own,
    running the containerd in `containerd_dir` with `flags`, logging at debug level (containerd's applies)."""

    def __init__(self, folder: Path, setting: str = "engine") -> None:
        containerd_dir, flags, image_store = SETTINGS[setting]
        if not (containerd_dir / "containerd").is_file():
            sys.exit(f"bench_pull: setting {setting} needs {containerd_dir / 'containerd'}")
        self.dir, self.setting = folder, setting
        self.store = "containerd" if image_store else "overlay2 (dockerd's own)"
        folder.mkdir(parents=True, exist_ok=True)
        self.disk = own_disk(folder)
        config = folder / "daemon.json"
        config.write_text(json.dumps({"features": {"containerd-snapshotter": image_store}, "debug": True}) + "\n")
        env = {"PATH": f"{containerd_dir}:{ENGINE / 'usr' / 'sbin'}:{ENGINE / 'usr' / 'bin'}:{os.environ['PATH']}",
               "IMAGEBUILD_DOCKERD": str(ENGINE / "usr" / "sbin" / "dockerd"),
               "IMAGEBUILD_DOCKERD_FLAGS": " ".join(("--config-file", str(config), *flags))}
        try:
            out = run("bash", str(ROOT / "scripts" / "docker-engine.sh"), "--fresh", str(folder / "engine"), env=env,
                      timeout=600)
        except SystemExit:
            self.stop()
            raise
        host = out.strip().rsplit("=", 1)[1]
        config_dir = ROOT / ".tools" / "docker-config"
        self.env = {"DOCKER_HOST": host, "DOCKER_CONFIG": str(config_dir)}
        self.log = folder / "engine" / "dockerd.log"
        components = self.docker("version", "--format", "{{range .Server.Components}}{{.Name}} {{.Version}};{{end}}")
        self.containerd = next((c.split()[1] for c in components.split(";") if c.startswith("containerd ")), "?")

    def docker(self, *args: str, timeout: int = 3600) -> str:
        return run("docker", *args, env=self.env, timeout=timeout)

    def stop(self) -> None:
        subprocess.run(["bash", str(ROOT / "scripts" / "docker-engine.sh"), "--stop", str(self.dir / "engine")],
                       capture_output=True, check=False, timeout=180)
        if self.disk is not None:
            subprocess.run(["umount", str(self.dir)], capture_output=True, check=False, timeout=180)
            self.disk.unlink(missing_ok=True)
        subprocess.run(["rm", "-rf", str(self.dir)], check=False)


def stamp_of(line: str) -> float | None:
    """The wall-clock time of one dockerd/containerd log line (`time="2026-12-08T00:18:43.36Z"`), or None."""
    stamp = re.match(r'time="([0-9-]+T[0-9:]+)(\.[0-9]+)?Z"', line)
    if not stamp:
        return None
    return datetime.datetime.strptime(stamp.group(1), "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.timezone.utc).timestamp() + float(stamp.group(2) or 0)


def applies(log: Path, since: float) -> list[tuple[float, float, int]]:
    """(began, seconds, size) of each layer the node applied after `since` (a wall-clock time), from its debug log:
    containerd's `msg="diff applied" d=1.1s ... size=N` (N compressed), or on the overlay2 graph driver dockerd's own
    `Applying tar in DIR` ... `Applied tar sha256:... to ID, size: N` (N uncompressed; one layer at a time)."""
    found = []
    applying: float | None = None
    for line in log.read_text(errors="replace").splitlines():
        ended = stamp_of(line)
        if ended is None or ended < since:
            continue
        if 'msg="Applying tar in ' in line:
            applying = ended
            continue
        if 'msg="Applied tar ' in line and applying is not None:
            size = re.search(r"size: (\d+)", line)
            found.append((applying - since, ended - applying, int(size.group(1)) if size else 0))
            applying = None
            continue
        if 'msg="diff applied"' not in line:
            continue
        took = re.search(r'\bd="?([0-9.]+)(s|ms|µs|us|ns)\b', line)
        size = re.search(r"\bsize=(\d+)", line)
        if took and size:
            seconds = float(took.group(1)) * SECONDS[took.group(2)]
            found.append((ended - seconds - since, seconds, int(size.group(1))))
    return found


def pull(node: Node, ref: str) -> dict[str, Any]:
    """The node's cold pull of `ref`, the host's writes synced first; and when its applies began and took."""
    run("sync")
    since = time.time()
    start = time.monotonic()
    node.docker("pull", "-q", ref)
    took = time.monotonic() - start
    done = applies(node.log, since)
    if not done:
        sys.exit(f"bench_pull: the node's log {node.log} shows no layer applied (dockerd at debug level?)")
    largest = max(done, key=lambda a: a[2])
    return {"containerd": node.containerd, "image store": node.store, "pull": took,
            "first apply began": min(a[0] for a in done),
            "applies": sum(a[1] for a in done), "largest apply": largest[1]}


def registry_read(registry: str, ref: str) -> tuple[float, list[dict[str, Any]]]:
    """Seconds to GET every layer blob of `ref` (read and dropped), and the manifest's layers."""
    repo, _, tag = ref.partition("/")[2].rpartition(":")
    conn = http.client.HTTPConnection(registry, timeout=600)
    conn.request("GET", f"/v2/{repo}/manifests/{tag}", headers={"Accept": ACCEPT})
    manifest = json.loads(conn.getresponse().read())
    layers = list(manifest["layers"])
    start = time.monotonic()
    for layer in layers:
        conn.request("GET", f"/v2/{repo}/blobs/{layer['digest']}")
        answer = conn.getresponse()
        while answer.read(1 << 20):
            pass
    conn.close()
    return time.monotonic() - start, layers


def untar_floor(ref: str, layers: list[dict[str, Any]], work: Path) -> dict[str, float]:
    """The floor on the node's disk, and beside it what a pull does beyond it, each timed on its own, one layer after
    another on one core:
    - untar: the uncompressed layers, in order, into one empty directory, then `sync`; unsynced: the same without
      waiting for the sync (a pull returns with its files' writes not yet on disk); whiteouts left as files (the
      floor of the snapshotter's writes, not an overlay);
    - inflate: the compressed blobs (fetched beforehand) into tars;
    - verify: sha256 of each compressed blob and of each tar (what containerd checks: the blob's digest as it is
      fetched, the layer's diff ID as it is applied);
    - store: each compressed blob written to the node's disk and synced (containerd's content store keeps every
      blob and syncs it before it commits it).
    None of the last three is part of the floor the issue names (read + untar): they are what stands between."""
    host, _, rest = ref.partition("/")
    repo = rest.rpartition(":")[0]
    plain: list[Path] = []
    inflate = verify = store = 0.0
    for n, layer in enumerate(layers):
        packed, tar, kept = work / f"layer-{n}.blob", work / f"layer-{n}.tar", work / f"layer-{n}.stored"
        url = f"http://{host}/v2/{repo}/blobs/{layer['digest']}"
        with urllib.request.urlopen(url, timeout=600) as answer, packed.open("wb") as out:  # noqa: S310 (loopback)
            shutil.copyfileobj(answer, out, 1 << 20)
        start = time.monotonic()
        with packed.open("rb") as src, tar.open("wb") as out:
            media = str(layer["mediaType"])
            if media.endswith("zstd"):
                zstandard.ZstdDecompressor().copy_stream(src, out)
            elif media.endswith("gzip"):
                shutil.copyfileobj(gzip.GzipFile(fileobj=src), out, 1 << 20)
            else:
                shutil.copyfileobj(src, out, 1 << 20)
        inflate += time.monotonic() - start
        start = time.monotonic()
        digest = sha256_file(packed)
        sha256_file(tar)
        verify += time.monotonic() - start
        if f"sha256:{digest}" != layer["digest"]:
            raise SystemExit(f"bench: {url} sent bytes whose sha256 is {digest}")
        start = time.monotonic()
        with packed.open("rb") as src, kept.open("wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        store += time.monotonic() - start
        packed.unlink()
        kept.unlink()
        plain.append(tar)
    target = work / "rootfs"
    target.mkdir()
    run("sync")
    start = time.monotonic()
    for tar in plain:
        run("tar", "-x", "--numeric-owner", "-f", str(tar), "-C", str(target))
    unsynced = time.monotonic() - start
    run("sync")
    took = time.monotonic() - start
    shutil.rmtree(target)
    for tar in plain:
        tar.unlink()
    return {"untar": took, "unsynced": unsynced, "inflate": inflate, "verify": verify, "store": store}


def pull_and_floor(node: Node, ref: str) -> dict[str, Any]:
    """The node's cold pull of `ref` and the floor of that pull on the node's disk (module doc)."""
    pulled = pull(node, ref)
    read, layers = registry_read(ref.split("/")[0], ref)
    floor = untar_floor(ref, layers, node.dir)
    sizes = sorted((int(layer["size"]) for layer in layers), reverse=True)
    return {**pulled, "read": read, **floor, "layers": float(len(layers)),
            "largest": sizes[0] / 1e6 if sizes else 0.0, "total": sum(sizes) / 1e6}


FLOOR_ROWS = {  # row -> key of pull_and_floor's answer
    "pull floor: registry read (s)": "read",
    "pull floor: untar (s)": "untar",
    "pull floor: untar, its writes not yet synced (s)": "unsynced",
    "pull, beyond the floor: inflate the layers on one core (s)": "inflate",
    "pull, beyond the floor: sha256 of each blob and each layer's tar, one core (s)": "verify",
    "pull, beyond the floor: the compressed blobs stored and synced (s)": "store",
}


def pull_rows(measured: list[dict[str, Any]], prefix: str = "") -> dict[str, float | str]:
    """The table's rows of `measured` (one dict per fresh node): medians, and each run's pull beside them."""
    def median(key: str) -> float:
        return statistics.median(m[key] for m in measured)

    rows: dict[str, float | str] = {
        f"{prefix}node: image store": " ".join(sorted({str(m.get("image store", "containerd")) for m in measured})),
        f"{prefix}node: containerd": " ".join(sorted({m["containerd"] for m in measured})),
        f"{prefix}cold pull (s)": median("pull")}
    if len(measured) > 1:
        rows[f"{prefix}cold pull, each run (s)"] = " ".join(f"{m['pull']:.2f}" for m in measured)
    rows[f"{prefix}pull: the first layer began to apply at (s)"] = median("first apply began")
    rows[f"{prefix}pull: the layers applied, one after another (s)"] = median("applies")
    rows[f"{prefix}pull: the largest layer's apply (s)"] = median("largest apply")
    if "read" in measured[0]:
        rows.update({f"{prefix}{row}": median(key) for row, key in FLOOR_ROWS.items()})
        rows[f"{prefix}pull: layers"] = measured[0]["layers"]
        rows[f"{prefix}pull: compressed MB (largest layer)"] = (f"{measured[0]['total']:.1f} "
                                                                 f"({measured[0]['largest']:.1f})")
    return rows


def ratio(rows: dict[str, float | str], floor: dict[str, float | str], prefix: str = "") -> str:
    pulled = float(rows[f"{prefix}cold pull (s)"])
    read = float(floor[f"{prefix}pull floor: registry read (s)"])
    synced = pulled / (read + float(floor[f"{prefix}pull floor: untar (s)"]))
    unsynced = pulled / (read + float(floor[f"{prefix}pull floor: untar, its writes not yet synced (s)"]))
    return f"pull/floor {synced:.2f}x (≤ 1.3x) ({unsynced:.2f}x of the floor not waiting for its sync)"


def push_small_image(registry: str, work: Path) -> str:
    """A two-layer zstd OCI image of its own (a few hundred files) pushed to `registry` with imagebuild's own
    registry client: the --quick image."""
    from imagebuild.oci import RegistryAuth, RegistryClient

    client, repo = RegistryClient(RegistryAuth(registry)), "bench-pull"
    layers: list[dict[str, Any]] = []
    blobs: list[Path] = []
    diff_ids = []
    for n in range(2):
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as tar:
            for i in range(200):
                data = os.urandom(512) * 8
                info = tarfile.TarInfo(f"layer{n}/dir{i % 10}/file{i}.bin")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        diff_ids.append("sha256:" + hashlib.sha256(raw.getvalue()).hexdigest())
        blob = work / f"layer{n}.tar.zst"
        blob.write_bytes(zstandard.ZstdCompressor(level=3).compress(raw.getvalue()))
        blobs.append(blob)
        layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd",
                       "digest": f"sha256:{sha256_file(blob)}", "size": blob.stat().st_size})
    config = work / "config.json"
    config.write_text(json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                                  "rootfs": {"type": "layers", "diff_ids": diff_ids}}))
    config_desc: dict[str, Any] = {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": f"sha256:{sha256_file(config)}", "size": config.stat().st_size}
    for desc, path in [(config_desc, config), *zip(layers, blobs, strict=True)]:
        client.put_blob(repo, str(desc["digest"]), path, int(desc["size"]))
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": config_desc, "layers": layers}).encode()
    client.put_manifest(repo, "quick", manifest, "application/vnd.oci.image.manifest.v1+json")
    return f"{registry}/{repo}:quick"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("refs", nargs="*", metavar="REF",
                    help="the images to pull (REGISTRY/REPO:TAG on a plain-http registry), side by side")
    ap.add_argument("--runs", type=int, default=3, metavar="N", help="fresh nodes per setting (medians; default 3)")
    ap.add_argument("--setting", action="append", choices=sorted(SETTINGS), help="(repeatable) default: all")
    ap.add_argument("--quick", action="store_true", help="a small image of its own, one run per setting (CI)")
    args = ap.parse_args()
    if not args.quick and not args.refs:
        ap.error("REF is required without --quick")
    settings = args.setting or [s for s in SETTINGS if (SETTINGS[s][0] / "containerd").is_file()]
    work = Path(tempfile.mkdtemp(prefix="ib-pull-", dir="/var/tmp"))
    registry_dir = work / "registry"
    try:
        refs = list(args.refs)
        if args.quick:
            args.runs = 1
            out = run("bash", str(ROOT / "scripts" / "registry.sh"), "--quiet", "--dir", str(registry_dir))
            refs = [push_small_image(out.split("REGISTRY=", 1)[1].split()[0], work)]
        columns = [(ref, setting) for ref in refs for setting in settings]
        measured: dict[tuple[str, str], list[dict[str, Any]]] = {c: [] for c in columns}
        for n in range(args.runs):  # run n of every column before run n + 1 of any: a slower minute hits them all
            for ref, setting in columns:
                node = Node(work / f"n{n}", setting)
                try:  # the floor once per image, on the nodes of the first setting
                    measured[ref, setting].append(pull_and_floor(node, ref) if setting == settings[0] else
                                                  pull(node, ref))
                finally:
                    node.stop()
                print(f"measured {ref} {setting} run {n + 1}: {json.dumps(measured[ref, setting][-1])}",
                      file=sys.stderr, flush=True)
    finally:
        subprocess.run(["bash", str(ROOT / "scripts" / "registry.sh"), "--stop", "--dir", str(registry_dir)],
                       capture_output=True, check=False, timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    table = {c: pull_rows(m) for c, m in measured.items()}
    keys = list(dict.fromkeys(k for rows in table.values() for k in rows))
    for n, ref in enumerate(refs, 1):
        print(f"image {n}: {ref}")
    print()
    label = {c: (f"image {refs.index(c[0]) + 1}: " if len(refs) > 1 else "") + c[1] for c in columns}
    print("| | " + " | ".join(label[c] for c in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for key in keys:
        cells = [table[c].get(key, "–") for c in columns]
        print(f"| {key} | " + " | ".join(f"{c:.2f}" if isinstance(c, float) else str(c) for c in cells) + " |")
    print()
    for ref, setting in columns:
        print(f"{label[ref, setting]}: {ratio(table[ref, setting], table[ref, settings[0]])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
