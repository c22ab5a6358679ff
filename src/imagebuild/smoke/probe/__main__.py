"""The probe's command line: run the selected sections and print ONE JSON document on stdout.

    python probe.pyz [--sections system,versions,...] [--perf] [--timeout S] [--output FILE]
    python probe.pyz --table FILE          # render a short table of a saved result
    PYTHONPATH=<dir holding probe/> python -m probe ...   # the same, from the files

Everything printed by libraries (NCCL_DEBUG, warnings) goes to stderr; stdout carries only the JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time

if not __package__:  # `python path/to/probe` (the directory): make `probe` importable from its parent
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from probe import (  # noqa: E402
    amp,
    dev,
    distributed,
    gpu,
    hygiene,
    libraries,
    locales,
    perf,
    pipcheck,
    release,
    sharedlibs,
    system,
    te,
    tf32,
    torch_compile,
    uid,
    versions,
)
from probe.common import DEFAULT_SECTIONS, SECTIONS, Probe, render_table, watchdog, write_all  # noqa: E402

RUNNERS = {"system": system.run, "hygiene": hygiene.run, "locale": locales.run, "pip": pipcheck.run,
           "ldd": sharedlibs.run, "uid": uid.run, "versions": versions.run, "libraries": libraries.run, "gpu": gpu.run,
           "tf32": tf32.run, "amp": amp.run, "distributed": distributed.run, "te": te.run, "dev": dev.run,
           "compile": torch_compile.run, "release": release.run, "perf": perf.run}
# sections that run part of their work in a child probe (`--child SECTION`): a crash there cannot end the probe
CHILD_RUNNERS = {"te": te.child, "compile": torch_compile.child, "release": release.child}


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="imagebuild in-image probe (prints one JSON document)")
    ap.add_argument("--sections", default=",".join(DEFAULT_SECTIONS),
                    help=f"comma-separated subset of {','.join(SECTIONS)} (default: all but dev, perf)")
    ap.add_argument("--perf", action="store_true", help="add the perf section (GPU GEMM, NCCL bandwidth)")
    ap.add_argument("--timeout", type=float, default=0, help="overall seconds; on overrun emit partial JSON")
    ap.add_argument("--output", help="also write the JSON to this file")
    ap.add_argument("--table", metavar="FILE", help="render a saved result as a table and exit")
    ap.add_argument("--dist-worker", metavar="BACKEND", help=argparse.SUPPRESS)
    ap.add_argument("--child", choices=sorted(CHILD_RUNNERS), help=argparse.SUPPRESS)
    ap.add_argument("--te-child", action="store_const", dest="child", const="te", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.table:
        with open(args.table) as fh:
            print(render_table(json.load(fh)))
        return 0
    if args.dist_worker:
        distributed.dist_worker(args.dist_worker, args.perf)
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
    probe = Probe(sections, perf=args.perf, deadline=deadline)
    if args.timeout:
        watchdog(args.timeout, probe, out_fd)
    if args.child:
        CHILD_RUNNERS[args.child](probe)
    else:
        probe.run(RUNNERS)
    text = json.dumps(probe.doc, default=str, indent=None)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text)
    write_all(out_fd, text.encode() + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
