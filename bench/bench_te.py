"""transformer_engine builds of a matrix: images planned vs distinct builds vs TE compiles, and for every TE key
already in the wheel cache, its cold compile time (recorded when it was built) vs a cache hit (finding the wheel and
putting it in a build context, measured now).

Usage: python bench/bench_te.py --matrix images/h100.yaml
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from imagebuild.builder.context import tar_context  # noqa: E402
from imagebuild.builder.te_cache import TE_WHEEL_DIR, cache_root, cached  # noqa: E402
from imagebuild.inputs import BuildInputs  # noqa: E402
from imagebuild.matrix import find_matrix  # noqa: E402
from imagebuild.plan import make_plan  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matrix", default="images/h100.yaml")
    args = ap.parse_args()
    plan = make_plan(find_matrix(args.matrix), BuildInputs(), None)
    keys = {i.te_wheel.key: i for i in plan.images if i.te_wheel is not None}
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
