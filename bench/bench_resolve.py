"""Time validate + resolve + plan on a generated 500-variant matrix.

    PYTHONPATH=src python bench/bench_resolve.py [--variants 500] [--repeat 5] [--quick]

The matrix is generated from the compatibility tables: every (torch, cuda, python, os) combination the tables
accept, so each variant resolves for real; include rows carry the variants beyond the first product. Where a
transformer_engine release fits the variant (resolve's own rules, `te_problems`), the newest such release is asked
for, so the TE rules are timed too and a table change cannot make the generated matrix invalid.
--quick: 20 variants, one repetition (what CI runs so the bench cannot rot). Goal: well under 1 s for 500 variants.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from imagebuild.compat import load, vtuple  # noqa: E402
from imagebuild.inputs import BuildInputs  # noqa: E402
from imagebuild.matrix import load_matrix  # noqa: E402
from imagebuild.plan import make_plan  # noqa: E402
from imagebuild.resolve import resolve_matrix  # noqa: E402
from imagebuild.resolve.platform import te_problems  # noqa: E402

GPU_ARCHS: tuple[str, ...] = ()  # the generated matrix names none (the schema's default)


def fitting_te(tables, release, cuda: str) -> str | None:
    """The newest transformer_engine release resolve accepts for torch `release` on CUDA `cuda`, or None."""
    if cuda == "cpu":
        return None
    info, cudnn = tables.cuda[cuda], release.variants[cuda].cudnn
    fits = [v for v, te in tables.te.items() if not te_problems(te, release, info, cudnn, GPU_ARCHS)]
    return max(fits, key=vtuple, default=None)


def combinations(limit: int) -> list[tuple[str, str, str, str, str | None]]:
    """Valid (torch, cuda, python, os, transformer_engine or None) rows, newest torch first."""
    tables = load()
    rows = []
    for release in sorted(tables.torch.values(), key=lambda r: [int(x) for x in r.version.split(".")], reverse=True):
        for cuda in release.variants:
            for python in release.pythons():
                for os_info in tables.os.values():
                    if python == os_info.system_python or python in os_info.installable_pythons:
                        if vtuple(os_info.glibc) >= vtuple(release.glibc):
                            te = fitting_te(tables, release, cuda)
                            rows.append((release.version, cuda, python, os_info.id, te))
    return rows[:limit]


def generate(n: int) -> str:
    rows = combinations(n)
    if len(rows) < n:
        raise SystemExit(f"the tables allow only {len(rows)} distinct variants, asked for {n}")
    lines = [
        "name: pytorch",
        "registry: registry.example.internal:5000/ml",
        "defaults: {flavors: [base, runtime, dev], tf32: true, torchvision: false, torchaudio: false}",
        "include:",
    ]
    for t, c, p, o, te in rows:
        extra = f', transformer_engine: "{te}"' if te else ""
        lines.append(f'  - {{torch: "{t}", cuda: "{c}", python: "{p}", os: {o}{extra}}}')
    return "\n".join(lines) + "\n"


def timed(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="20 variants, one repetition (CI)")
    args = ap.parse_args()
    if args.quick:
        args.variants, args.repeat = 20, 1

    start = time.perf_counter()
    load()  # first call parses the YAML tables; later calls hit the cache
    tables_s = time.perf_counter() - start

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(generate(args.variants), encoding="utf-8")
        load_s, doc = timed(lambda: load_matrix(path), args.repeat)
        resolve_s, variants = timed(lambda: resolve_matrix(load_matrix(path), BuildInputs()), args.repeat)
        rows = [("compat tables (first load)", tables_s), ("validate: load + schema + expand", load_s),
                ("validate + resolve", resolve_s)]
        plan_s, plan = timed(lambda: make_plan(path, BuildInputs(), None), max(1, args.repeat // 2))
        rows.append((f"plan (make_plan, {len(plan.images)} images)", plan_s))

    images = sum(len(v.flavors) for v in variants)
    print(f"matrix: {len(doc.variants)} variants, {images} images (median of {args.repeat} runs)")
    print(f"{'stage':<40} {'seconds':>9} {'per variant':>13}")
    for name, seconds in rows:
        print(f"{name:<40} {seconds:>9.3f} {seconds / len(variants) * 1e6:>10.0f} µs")
    total = resolve_s + (rows[3][1] if len(rows) > 3 else 0.0)
    print(f"{'total (validate + resolve' + (' + plan)' if len(rows) > 3 else ')'):<40} {total:>9.3f}"
          f"   goal <= 1 s: {'ok' if total <= 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
