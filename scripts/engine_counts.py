"""What a test run cost its engines, from the engines' own events (scripts/run-tests.sh prints it last).

    python scripts/engine_counts.py record FILE DOCKER_HOST      stream the engine's events into FILE (JSON lines)
                                                                 until stopped; run-tests.sh starts one per engine
                                                                 before the first test
    python scripts/engine_counts.py count NAME=FILE [NAME=FILE ...]

The events are recorded as they happen: an engine keeps only its last 256 events for a later `docker events
--since` (moby's events buffer), so a busy run's early builds were missing from a count read at the end.
For each engine: OS bootstraps (an image with a bootstrap label and no flavor label loaded or imported: how a
bootstrapped rootfs enters an engine; a second load of the same OS image counts again), images built or loaded with an
imagebuild flavor label (distinct image IDs per flavor: a rebuild that reproduces an ID counts once), and smoke suites
run (the runner names a suite's container PREFIX-smoke-IMAGE-XXXXXX and each side container of it that name plus
-SUFFIX: a suite is a smoke container no other one is the start of) with the distinct images they ran. Engines a test
starts and stops on its own (fresh engines) are not in these figures. A recording that is missing or never started
(its first line says when the stream opened) is one `error:` line and exit 1 — a count that could not be read is
never printed as 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

FLAVOR = "io.imagebuild.flavor"
BOOTSTRAP = "io.imagebuild.bootstrap-hash"
SMOKE = "-smoke-"


def count(events: list[dict]) -> dict[str, object]:
    """Figures from one engine's events (the Engine API's event objects)."""
    imports = 0
    built: dict[str, set[str]] = defaultdict(set)
    smoke: list[tuple[str, str]] = []  # (container name, image) of each container created
    for event in events:
        kind, action = event.get("Type"), event.get("Action", "")
        actor = event.get("Actor") or {}
        attributes = actor.get("Attributes") or {}
        if kind == "image" and action in ("import", "load") and attributes.get(BOOTSTRAP) \
                and not attributes.get(FLAVOR):  # a bootstrapped rootfs, loaded as an OS image
            imports += 1
        elif kind == "image" and action in ("tag", "load") and attributes.get(FLAVOR):
            built[attributes[FLAVOR]].add(actor.get("ID", ""))
        elif kind == "container" and action == "create" and SMOKE in attributes.get("name", ""):
            smoke.append((attributes["name"], attributes.get("image", "")))
    names = {name for name, _ in smoke}
    suites = [(name, image) for name, image in smoke if not any(name.startswith(other + "-") for other in names)]
    flavors = Counter({flavor: len(ids) for flavor, ids in built.items()})
    return {"bootstraps": imports, "images": sum(flavors.values()), "by_flavor": dict(sorted(flavors.items())),
            "smoke_suites": len(suites), "smoke_images": len({image for _, image in suites})}


def line(name: str, figures: dict) -> str:
    flavors = ", ".join(f"{k} {v}" for k, v in figures["by_flavor"].items()) or "none"
    return (f"{name}: {figures['bootstraps']} OS bootstraps, {figures['images']} imagebuild images built or loaded "
            f"({flavors}), {figures['smoke_suites']} smoke suites run on {figures['smoke_images']} images")


def record(path: Path, host: str) -> int:
    """Append each event of the engine at `host` to `path` as it happens, after a first line saying the stream is
    open; returns when the engine closes the stream (the run stops the recorder with a signal before that)."""
    import docker

    try:
        client = docker.DockerClient(base_url=host, timeout=60)
        stream = client.events(decode=True)
    except Exception as exc:  # noqa: BLE001 - reported; count then refuses the missing recording
        print(f"error: engine_counts: {host}: events not read: {exc}", file=sys.stderr)
        return 1
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps({"recording": host, "since": time.time()}) + "\n")
        out.flush()
        for event in stream:
            out.write(json.dumps(event) + "\n")
            out.flush()
    return 0


def read_recording(path: Path) -> list[dict]:
    """The events of one recording; ValueError when it is missing or never started."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValueError(f"{path}: no recording ({exc.strerror})") from None
    if not lines or "recording" not in json.loads(lines[0]):
        raise ValueError(f"{path}: the recorder never opened the engine's event stream")
    events = []
    for number, text in enumerate(lines[1:], start=2):
        try:
            events.append(json.loads(text))
        except json.JSONDecodeError:
            if number == len(lines):  # the last line cut short by the signal that stopped the recorder
                break
            raise ValueError(f"{path}:{number}: not an event (JSON)") from None
    return events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("file", type=Path)
    rec.add_argument("host")
    cnt = sub.add_parser("count")
    cnt.add_argument("engines", nargs="+", metavar="NAME=FILE")
    args = parser.parse_args(argv)
    if args.mode == "record":
        return record(args.file, args.host)
    for spec in args.engines:
        name, sep, file = spec.partition("=")
        if not sep or not file:
            print(f"error: engine_counts: {spec!r}: expected NAME=FILE", file=sys.stderr)
            return 2
        try:
            events = read_recording(Path(file))
        except (ValueError, json.JSONDecodeError) as exc:
            print(f"error: engine_counts: {name}: {exc}", file=sys.stderr)
            return 1
        print(line(name, count(events)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
