"""transformer_engine builds of a matrix: images planned vs distinct builds vs TE compiles, and for every TE key
already in the wheel cache, its cold compile time (recorded when it was built) vs a cache hit (finding the wheel and
putting it in a build context, measured now).

Usage: python bench/bench_te.py --matrix images/h100.yaml [--quick]

--quick (CI): the cache is a temporary folder holding a stand-in entry (meta.json + a small file named like the
wheel) for the first TE key, so the cache-hit path runs without a 5-12 minute compile; its "cold compile" figure is
the stand-in's, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from imagebuild.builder.context import tar_context  # noqa: E402
from imagebuild.builder.te_cache import CACHE_ENV, TE_WHEEL_DIR, cache_root, cached, wheel_dir  # noqa: E402
from imagebuild.inputs import BuildInputs  # noqa: E402
from imagebuild.matrix import find_matrix  # noqa: E402
from imagebuild.plan import make_plan  # noqa: E402


def stand_in(key: str) -> None:
    """A complete-looking cache entry for `key` (what `cached` accepts): --quick's cache hit without a compile."""
    folder = wheel_dir(key)
    folder.mkdir(parents=True)
    (folder / "transformer_engine_torch-0.0.0-cp312-cp312-linux_x86_64.whl").write_bytes(b"stand-in\n" * 1024)
    (folder / "meta.json").write_text(json.dumps({"wheel": "stand-in (bench_te --quick)", "seconds": 1.0}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matrix", default="images/h100.yaml")
    ap.add_argument("--quick", action="store_true", help="a temporary cache with one stand-in entry (CI)")
    args = ap.parse_args()
    if args.quick:
        with tempfile.TemporaryDirectory(prefix="ibbench-te-") as tmp:
            os.environ[CACHE_ENV] = tmp
            return report(args, quick=True)
    return report(args, quick=False)


def report(args: argparse.Namespace, quick: bool) -> int:
    plan = make_plan(find_matrix(args.matrix), BuildInputs(), None)
    keys = {i.te_wheel.key: i for i in plan.images if i.te_wheel is not None}
    if quick and keys:
        stand_in(min(keys))
    table = Table(title=f"bench_te {args.matrix} (cache {cache_root()})", title_justify="left")
    for col in ("measure", "figure", "notes"):
        table.add_column(col)
    table.add_row("images planned", str(len(plan.images)), "")
    table.add_row("distinct builds", str(len({i.inputs_hash for i in plan.images})),
                  "images with the same inputs hash build once (shared bases)")
    table.add_row("TE compiles", str(len(keys)), "one per (TE, torch, CUDA, Python, ABI, GPU archs, OS) key")
    for key, img in sorted(keys.items(), key=lambda kv: kv[1].tag):
        found = cached(key)
        name = img.tag.rsplit(":", 1)[-1]
        if found is None:
            table.add_row(f"TE {key[:12]} ({name})", "not cached", "build the matrix first")
            continue
        meta = json.loads((found / "meta.json").read_text())
        t0 = time.perf_counter()
        d = cached(key)
        assert d is not None
        ctx = tar_context("FROM scratch\n", {}, {TE_WHEEL_DIR: d})
        ctx.close()
        hit = time.perf_counter() - t0
        cold = meta.get("seconds")
        table.add_row(f"TE {key[:12]} ({name}) cold compile", f"{cold:.0f} s" if cold else "?", meta.get("wheel", ""))
        table.add_row(f"TE {key[:12]} cache hit", f"{hit * 1000:.1f} ms",
                      f"ratio hit/cold {hit / cold:.1e}" if cold else "")
    Console(width=160).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
