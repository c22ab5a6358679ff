#!/usr/bin/env python3
"""Export cost (a figure, not a test): seconds of `imagebuild export` and the size of what it writes against the
image's own size, per format and squashfs compression. Prints a Markdown table:

  image | image size | format | compression | seconds (median of N) | output size | output / image | same bytes

"same bytes": every repetition of a squashfs export gave the same sha256 (the reproducibility promise, measured).

Usage (an engine that holds the image: DOCKER_HOST or the default socket):
  python bench/bench_export.py                                   # the CPU runtime of images/cpu.yaml (built)
  python bench/bench_export.py --image REF --repeat 3 --markdown bench/export-cpu.md
  python bench/bench_export.py --quick    # small: a generated 24 MB image (docker import), gzip only, once
"""

from __future__ import annotations

import argparse
import io
import json
import os
import secrets
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from imagebuild.units import format_size  # noqa: E402


def imagebuild(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "imagebuild", *args], capture_output=True, text=True, env=env)


def quick_image() -> str:
    """A small image made here (`docker import` of 3000 files, 24 MB, mixed owners), so --quick needs no build."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(3000):
            size = 5000 + (i % 7) * 1000
            data = os.urandom(size // 2) + bytes(size - size // 2)  # half noise, half zeros: compresses ~2:1
            info = tarfile.TarInfo(f"opt/data/{i // 100:02d}/f{i:05d}.bin")
            info.size, info.mode, info.uid, info.mtime = len(data), 0o644, 1000 * (i % 2), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    tag = f"imagebuild-bench-export:{secrets.token_hex(4)}"
    proc = subprocess.run(["docker", "import", "-c", "ENV PATH=/usr/bin", "-", tag], input=buf.getvalue(),
                          capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(f"docker import failed: {proc.stderr.decode(errors='replace').strip()}")
    return tag


def matrix_image(matrix: str, only: str) -> str:
    """The tag of the matrix's built image matching --only (the record's image for the plan's inputs)."""
    from imagebuild.engine import connect
    from imagebuild.pipeline.loaded import load
    from imagebuild.pipeline.located import locate
    from imagebuild.pipeline.selection import pick_one

    planned = load(matrix, None, None, None, lambda m: print(m, file=sys.stderr))
    row = pick_one(planned.plan, only, None, matrix)
    here = locate(connect("inspect"), row, planned.record)
    image_id, why = here.image_id, here.why
    if image_id is None:
        raise SystemExit(f"{row.id} is not built here ({why}): imagebuild build --matrix {matrix}, or --quick")
    return image_id


def image_size(ref: str) -> int:
    out = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, text=True, check=True).stdout
    return int(json.loads(out)[0]["Size"])


def one(source: list[str], fmt: str, compression: str | None, work: Path) -> tuple[float, int, str]:
    dest = work / f"out-{secrets.token_hex(3)}.{'sqsh' if fmt == 'squashfs' else 'tar'}"
    args = ["export", *source, "-o", str(dest), "--format", fmt]
    if compression:
        args += ["--compression", compression]
    t0 = time.monotonic()
    res = imagebuild(*args)
    seconds = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"imagebuild {' '.join(args)} failed: {res.stderr.strip()[-800:]}")
    size = dest.stat().st_size
    digest = Path(str(dest) + ".sha256").read_text().split()[0]
    dest.unlink()
    Path(str(dest) + ".sha256").unlink()
    return seconds, size, digest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", help="a local tag or ID (default: --matrix/--only's built image)")
    ap.add_argument("--matrix", default=str(ROOT / "images" / "cpu.yaml"))
    ap.add_argument("--only", default="*runtime")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a generated small image, gzip only, one repetition")
    ap.add_argument("--markdown", help="also write the table here")
    args = ap.parse_args()

    made = None
    if args.quick and not args.image:
        made = args.image = quick_image()
    repeat = 1 if args.quick else max(1, args.repeat)
    cases = [("squashfs", "gzip")] if args.quick else [("squashfs", "gzip"), ("squashfs", "none"),
                                                      ("docker-archive", None)]
    if args.image:
        source, name, size = [args.image], args.image, image_size(args.image)
    else:
        args.image = matrix_image(args.matrix, args.only)
        source, name, size = [args.image], args.image, image_size(args.image)
    rows = [f"| image | image size | format | compression | seconds (median of {repeat}) | output size | output / image "
            "| same bytes |", "|---|---:|---|---|---:|---:|---:|---|"]
    try:
        with tempfile.TemporaryDirectory(prefix="bench-export-", dir=os.environ.get("TMPDIR")) as tmp:
            for fmt, comp in cases:
                runs = [one(source, fmt, comp, Path(tmp)) for _ in range(repeat)]
                seconds = statistics.median(r[0] for r in runs)
                out_size = runs[0][1]
                same = "yes" if len({r[2] for r in runs}) == 1 else "NO"
                ratio = f"{out_size / size:.0%}" if size else "–"
                rows.append(f"| {name} | {format_size(size)} | {fmt} | {comp or '–'} | {seconds:.1f} | "
                            f"{format_size(out_size)} | {ratio} | {same if fmt == 'squashfs' and repeat > 1 else '–'} |")
    finally:
        if made:
            subprocess.run(["docker", "rmi", "-f", made], capture_output=True)
    table = "\n".join(rows) + "\n"
    print(table, end="")
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
