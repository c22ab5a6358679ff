"""The end-to-end table of a built matrix (make e2e-h100): per image its build result, the backend that built it,
its build time, size and size/floor, the transformer_engine wheel (compiled or cached, seconds) and the smoke
result, read from build-report.json and measured on the images themselves (floor: bench_build.bench_size).

Usage: python bench/e2e_table.py --report reports/e2e-h100/build-report.json [--markdown OUT.md] [--quick]

--quick (CI): at most one size/floor measurement (the first runtime image's; each runs containers).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_build import bench_size  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from imagebuild.engine import connect  # noqa: E402
from imagebuild.units import format_size  # noqa: E402

HEAD = ("image", "result", "backend", "build", "size", "size/floor", "TE wheel", "smoke pass/fail/skip")


def rows(report: dict, client, measure_sizes: int | None = None) -> list[tuple[str, ...]]:
    """One table row per report image; `measure_sizes`: at most this many size/floor measurements (None: all)."""
    out = []
    by_tag = {r["tag"]: r for r in report["images"]}
    for r in report["images"]:
        ratio = "-"
        if (r["status"] in ("built", "up-to-date") and r["flavor"] == "runtime" and r.get("parent")
                and (measure_sizes is None or measure_sizes > 0)):
            measure_sizes = None if measure_sizes is None else measure_sizes - 1
            [m] = bench_size(client, [(r["tag"], r["parent"])])
            ratio = f"{m['size'] / m['floor']:.3f} ({format_size(m['floor'])})"
        te = r.get("te_wheel") or {}
        te_text = (f"{te['status']} {te.get('seconds', 0):.0f} s" if te.get("status") == "built" else
                   f"cached (built in {te.get('built_seconds') or 0:.0f} s)" if te else "-")
        t = r.get("tests") or {}
        smoke = f"{t.get('passed', 0)}/{t.get('failed', 0)}/{t.get('skipped', 0)}" if t else "-"
        secs = r.get("build_seconds")
        error = (r.get("error") or "").split(f"{r['tag']}: ", 1)[-1]  # preflight lines start with the tag
        reason = "" if r["status"] in ("built", "up-to-date") else error[:70]
        out.append((r["tag"].rsplit(":", 1)[-1], r["status"] + (f": {reason}" if reason else ""),
                    r.get("backend") or "-", f"{secs:.0f} s" if secs else "-",
                    format_size(r["size"]) if r.get("size") else "-", ratio, te_text, smoke))
    assert len(by_tag) == len(out)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", required=True)
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--quick", action="store_true", help="at most one size/floor measurement (CI)")
    args = ap.parse_args()
    report = json.loads(Path(args.report).read_text())
    table_rows = rows(report, connect("inspect"), 1 if args.quick else None)
    table = Table(title=f"e2e {report.get('matrix')}", title_justify="left")
    for h in HEAD:
        table.add_column(h)
    for row in table_rows:
        table.add_row(*row)
    Console(width=220).print(table)
    if args.markdown:
        lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
        lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in table_rows]
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
