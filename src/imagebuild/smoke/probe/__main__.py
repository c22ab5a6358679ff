"""The probe's command line: run the selected sections and print ONE JSON document on stdout.

    python probe.pyz [--sections system,versions,...] [--perf] [--timeout S] [--output FILE]
    python probe.pyz --table FILE          # render a short table of a saved result
    python probe.pyz --list-sections       # the table of sections (probe/table.py) as JSON
    python probe.pyz --list-checks         # the table's checks (name, section, flavor, where, gpu) as JSON
    PYTHONPATH=<dir holding probe/> python -m probe ...   # the same, from the files

Everything printed by libraries (NCCL_DEBUG, warnings) goes to stderr; stdout carries only the JSON.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time

if not __package__:  # `python path/to/probe` (the directory): make `probe` importable from its parent
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from probe.common import DEFAULT_SECTIONS, SECTIONS, Probe  # noqa: E402
from probe.summary import render_table  # noqa: E402
from probe.table import TABLE, as_json, checks_json, section  # noqa: E402
from probe.watchdog import OUTPUT, watchdog, write_all  # noqa: E402


def runners() -> dict:
    """section -> its module's run(probe), for every row of the table."""
    return {row.name: importlib.import_module(f"probe.{row.module}").run for row in TABLE}


def starters() -> dict:
    """section -> its module's start(probe), for the sections that start their child probe ahead."""
    out = {}
    for row in TABLE:
        start = getattr(importlib.import_module(f"probe.{row.module}"), "start", None)
        if start is not None:
            out[row.name] = start
    return out


def child_runner(name: str):
    """The child(probe) of a section that runs part of its work in a child probe (`--child NAME`)."""
    return importlib.import_module(f"probe.{section(name).module}").child


CHILD_SECTIONS = tuple(row.name for row in TABLE if row.child)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="imagebuild in-image probe (prints one JSON document)")
    ap.add_argument("--sections", default=",".join(DEFAULT_SECTIONS),
                    help=f"comma-separated subset of {','.join(SECTIONS)} (default: {','.join(DEFAULT_SECTIONS)})")
    ap.add_argument("--perf", action="store_true", help="add the perf section (GPU GEMM, NCCL bandwidth)")
    ap.add_argument("--timeout", type=float, default=0, help="overall seconds; on overrun emit partial JSON")
    ap.add_argument("--output", help="also write the JSON to this file")
    ap.add_argument("--host", action="store_true",
                    help="probing a bare host, not an image (scripts/gpu-probe.sh): libraries.one_copy names the copy "
                         "torch loads and fails only on copies one process can map together")
    ap.add_argument("--table", metavar="FILE", help="render a saved result as a table and exit")
    ap.add_argument("--dist-worker", metavar="BACKEND", help=argparse.SUPPRESS)
    ap.add_argument("--list-sections", action="store_true",
                    help="print the table of sections (flavor, where each runs) as JSON and exit")
    ap.add_argument("--list-checks", action="store_true",
                    help="print the table's checks (section, flavor, where each runs, GPU or not) as JSON and exit")
    ap.add_argument("--child", choices=sorted(CHILD_SECTIONS), help=argparse.SUPPRESS)
    ap.add_argument("--te-child", action="store_const", dest="child", const="te", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.list_sections:
        print(json.dumps(as_json()))
        return 0
    if args.list_checks:
        print(json.dumps(checks_json()))
        return 0
    if args.table:
        with open(args.table) as fh:
            print(render_table(json.load(fh)))
        return 0
    if args.dist_worker:
        from probe.distributed import dist_worker

        dist_worker(args.dist_worker, args.perf)
        return 0

    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    if "all" in sections:
        sections = list(SECTIONS)
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)}; valid: {', '.join(SECTIONS)}")
    if args.perf and "perf" not in sections:
        sections.append("perf")

    # stdout carries only the JSON: everything else (NCCL logs, warnings, C++ prints) goes to stderr
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    deadline = time.time() + args.timeout if args.timeout else None
    probe = Probe(sections, perf=args.perf, deadline=deadline, host=args.host)
    if args.timeout:
        watchdog(args.timeout, probe, out_fd)
    if args.child:
        child_runner(args.child)(probe)
    else:
        probe.run(runners(), starters())
    OUTPUT.acquire()  # never returns once the watchdog fired: it writes the partial JSON and exits 3
    text = json.dumps(probe.doc, default=str, indent=None)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text)
    write_all(out_fd, text.encode() + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
