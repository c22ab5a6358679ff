"""Record the smoke suite's probe results from real images into tests/fixtures/probe-results/, and compare a fresh
run with a recording (the full tier's drift test, tests/integration/test_probe_recordings.py).

    python scripts/record_probe_results.py [--matrix images/cpu.yaml] [--flavor runtime ...] [--image REF ...]
        [--out tests/fixtures/probe-results]

Each image of the matrix (its tag as `imagebuild build --matrix` names it; `--image` for any other reference) must
be in the engine DOCKER_HOST names. The real runner (smoke/runner.py run_smoke) starts it with its side containers
and runs the real suite; from its result JSON this writes `<matrix stem>-<flavor>.json`:

    recording   image tag, image ID, flavor, probe version, suite version, date, engine, how to re-record
    container   what the suite reads from `docker inspect` of the container: io.imagebuild.* labels, Entrypoint,
                WorkingDir, User
    expectations  the --expect values the suite was given (none: the image's labels are the expectations)
    places      the raw probe document of each place (probe/table.py WHERE: image-user, root, arbitrary-uid,
                hpc): its `probe.sections` are the sections it was asked for
    verdict     the suite's outcome: passed/failed/skipped counts, and name, status and reason of every check

Run-specific strings are replaced before writing (container names and IDs, the probe's temp directory, log
timestamps), so a re-recording of the same image differs only where the image or the probe does, and in timings and
the ports services listened on, kept as recorded (drift ignores numbers).
tests/unit/test_smoke_recorded.py replays the places to the real suite (a stand-in probe prints them) and expects
the verdict; `drift()` is what the full tier reports when a fresh run of the same image disagrees with a recording.
A run whose probe did not run somewhere (no document for a place, the suite did not run) is not recorded: exit 1.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from imagebuild.smoke import probe as P  # noqa: E402
from imagebuild.smoke import runner  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "probe-results"
RECORD_COMMAND = "make record-probe-results"
CONTAINER = "<container>"  # the main container's name in a recording
# the probe's own folder in a container (the suite's `mktemp -d`): /tmp/tmp.Ab12Cd34Ef -> /tmp/tmp.XXXXXXXXXX
TEMP_DIR = re.compile(r"/tmp/tmp\.[A-Za-z0-9]{6,}")
GLOG_TIME = re.compile(r"\b([WIEF])\d{4} \d\d:\d\d:\d\d\.\d+")  # c10d's log lines: W1205 08:24:39.231050634
CONTAINER_ID = re.compile(r"[0-9a-f]{12}")  # a container's hostname: its short ID
SUITE_ERRORS = ("container/start", "image/present", "suite/run", "suite/timeout")  # runner.py: no suite verdict


class RecordError(RuntimeError):
    """A run that cannot be a recording (a probe did not run, the suite did not run)."""


def _scrub(value: Any, names: dict[str, str]) -> Any:
    """`value` with each run-specific string replaced: container names (longest first), the probe's temp folder."""
    if isinstance(value, dict):
        return {_scrub(k, names): _scrub(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, names) for v in value]
    if isinstance(value, str):
        for name in sorted(names, key=len, reverse=True):
            value = value.replace(name, names[name])
        return GLOG_TIME.sub(r"\1MMDD hh:mm:ss.n", TEMP_DIR.sub("/tmp/tmp.XXXXXXXXXX", value))
    return value


def _hostnames(value: Any) -> set[str]:
    """The containers' short IDs the probe reports as their hostname (`"hostname": "20a9370865c5"`)."""
    if isinstance(value, dict):
        found = {v for k, v in value.items() if k == "hostname" and isinstance(v, str) and CONTAINER_ID.fullmatch(v)}
        return found.union(*(_hostnames(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_hostnames(v) for v in value))
    return set()


def recording_from_result(result: dict[str, Any], info: dict[str, Any], image: str,
                          expectations: dict[str, str] | None = None, engine: str = "") -> dict[str, Any]:
    """A recording from the runner's result JSON (`<result_dir>/<name>.json`: the tests dict plus `probe`) and the
    engine's inspect of the image it ran. RecordError when the suite or a place's probe did not run."""
    errors = [f"{c['name']}: {c['reason']}" for c in result.get("checks", []) if c["name"] in SUITE_ERRORS]
    if errors or result.get("probe_error"):
        raise RecordError(f"{image}: the suite did not run: {'; '.join(errors) or result.get('probe_error')}")
    probe = dict(result.get("probe") or {})
    extra = probe.pop("extra_probes", None) or {}
    places = {P.IMAGE_USER: probe, **extra}
    flavor = result.get("flavor")
    wanted = [w for w in P.WHERE if P.sections_for(flavor or "runtime", w)]
    missing = [w for w in wanted if not places.get(w)]
    if missing:
        raise RecordError(f"{image}: no probe document for {', '.join(missing)} (its probe did not run): "
                          + "; ".join(f"{c['name']}: {c['reason']}" for c in result.get("checks", [])
                                      if c["status"] == "failed")[:2000])
    # the side containers' names are the main one's plus -SUFFIX (smoke/sides.py): <container>-uid, <container>-hpc
    names = {result["container"]: CONTAINER} if result.get("container") else {}
    names.update({h: "<hostname>" for h in _hostnames(places)})
    cfg = info.get("Config") or {}
    labels = {k: v for k, v in (cfg.get("Labels") or {}).items() if k.startswith("io.imagebuild.")}
    labels[runner.SMOKE_LABEL] = "1"  # the runner's label on its containers (the suite reads the container's)
    doc = {
        "recording": {
            "image": image, "image_id": info.get("Id"), "flavor": flavor,
            "probe_version": (probe.get("probe") or {}).get("version"), "suite_version": runner.suite_version(),
            "recorded": datetime.date.today().isoformat(), "engine": engine,
            "re_record": f"{RECORD_COMMAND} (scripts/record_probe_results.py; tests/unit/test_smoke_recorded.py "
                         "replays it, tests/integration/test_probe_recordings.py compares it with a fresh run)",
        },
        "container": {"Labels": labels, "Entrypoint": cfg.get("Entrypoint"), "WorkingDir": cfg.get("WorkingDir"),
                      "User": cfg.get("User")},
        "expectations": dict(expectations or {}),
        "places": {w: places[w] for w in P.WHERE if places.get(w)},
        "verdict": {"passed": result["passed"], "failed": result["failed"], "skipped": result["skipped"],
                    "checks": [{k: c[k] for k in ("name", "status", "reason")} for c in result["checks"]]},
    }
    scrubbed: dict[str, Any] = _scrub(doc, names)
    return scrubbed


def record_image(client: Any, image: str, expectations: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the real smoke suite on `image` (the runner: container, side containers, suite) and make its recording."""
    from imagebuild.engine.store import as_store

    info = as_store(client).inspect(image)
    if info is None:
        raise RecordError(f"{image}: not in this engine (build it first: imagebuild build --matrix ...)")
    with tempfile.TemporaryDirectory(prefix="ib-record-") as tmp:
        tests = runner.run_smoke(image, expectations=expectations, client=client, result_dir=tmp,
                                 name_prefix="ibrecord")
        if not tests.get("result_json"):
            raise RecordError(f"{image}: no result JSON: " + "; ".join(
                f"{c['name']}: {c['reason']}" for c in tests.get("checks", [])))
        result = json.loads(Path(tests["result_json"]).read_text())
    engine = str((client.version() or {}).get("Version", ""))
    return recording_from_result(result, info, image, expectations, f"Docker Engine {engine}".strip())


def dumps(recording: dict[str, Any]) -> str:
    """A recording as written: keys sorted, one value a line (reviewable diffs)."""
    return json.dumps(recording, indent=1, sort_keys=True, default=str) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# drift: a fresh run of the same image against its recording
# ---------------------------------------------------------------------------------------------------------------

NUMBER = re.compile(r"\d+(?:\.\d+)*")
# the vector ISAs the host CPU offers (release.cpu_isa: "avx2 on x86_64" here, "avx512 avx512_vnni on x86_64" on
# another machine): a fact of the machine the suite ran on, not of the image
CPU_ISA = re.compile(r"\b(?:avx|amx|sve|neon|asimd|vsx|zvector)\w*(?:\s+(?:avx|amx|sve|neon|asimd|vsx|zvector)\w*)*",
                     re.IGNORECASE)
PATH = re.compile(r"(?<![\w.])/[^\s,;:()'\"]+")


def norm_reason(reason: str) -> str:
    """A reason with what differs between runs of the same image masked: paths (temp folders, container names in
    them), the host CPU's vector ISAs, and numbers (timings, sizes, counts)."""
    return NUMBER.sub("N", CPU_ISA.sub("<cpu isa>", PATH.sub("<path>", reason or ""))).strip()


def drift(recorded: list[dict[str, Any]], fresh: list[dict[str, Any]]) -> list[str]:
    """Each check whose status or reason (norm_reason) differs between a recording's verdict and a fresh run's
    checks, or that only one of them has: one line each, empty when they agree."""
    old = {c["name"]: c for c in recorded}
    new = {c["name"]: c for c in fresh}
    out = []
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if a is None or b is None:
            have = a or b
            assert have is not None
            where = "the fresh run only" if a is None else "the recording only"
            out.append(f"{name}: in {where} ({have['status']}: {have['reason'][:300]})")
        elif a["status"] != b["status"] or norm_reason(a["reason"]) != norm_reason(b["reason"]):
            out.append(f"{name}: recorded {a['status']} ({a['reason'][:300]}), now {b['status']} "
                       f"({b['reason'][:300]})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matrix", default=str(ROOT / "images" / "cpu.yaml"),
                    help="the matrix whose images to record (their tags as `imagebuild build` names them)")
    ap.add_argument("--flavor", action="append", choices=P.FLAVORS, help="only these flavors (repeatable)")
    ap.add_argument("--image", action="append", metavar="REF",
                    help="record these images instead (any reference the engine has; flavor from its label)")
    ap.add_argument("--out", default=str(OUT), help=f"folder of the recordings (default {OUT.relative_to(ROOT)})")
    args = ap.parse_args(argv)

    stem = Path(args.matrix).stem
    if args.image:
        refs = list(args.image)
    else:
        from imagebuild.plan import make_plan

        refs = [img.tag for img in make_plan(args.matrix).images if not args.flavor or img.flavor in args.flavor]
    client = runner.docker_client()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for ref in refs:
        print(f"record: {ref} ...", flush=True)
        try:
            rec = record_image(client, ref)
        except RecordError as exc:
            print(f"record: error: {exc}", file=sys.stderr)
            failed += 1
            continue
        path = out / f"{stem}-{rec['recording']['flavor']}.json"
        path.write_text(dumps(rec))
        v = rec["verdict"]
        print(f"record: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {v['passed']} passed, "
              f"{v['failed']} failed, {v['skipped']} skipped ({path.stat().st_size // 1024} KiB)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
