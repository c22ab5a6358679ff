"""What a test run cost its engines, read from the engines' own event logs (scripts/run-tests.sh prints it last).

    python scripts/engine_counts.py --since EPOCH_SECONDS NAME=DOCKER_HOST [NAME=DOCKER_HOST ...]

For each engine, from `since` until now: OS bootstraps (an image with a bootstrap label and no flavor label loaded
or imported: how a bootstrapped rootfs enters an engine; a second load of the same OS image counts again), images built or loaded with an imagebuild flavor label (distinct image IDs per flavor: a rebuild that
reproduces an ID counts once), and smoke suites run (the runner names a suite's container PREFIX-smoke-IMAGE-XXXXXX
and each side container of it that name plus -SUFFIX: a suite is a smoke container no other one is the start of)
with the distinct images they ran. Engines a test starts and
stops on its own (fresh engines) are gone by then: their work is not in these figures. An engine that does not
answer is one `error:` line and exit 1 — a count that could not be read is never printed as 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--since", type=float, required=True)
    parser.add_argument("engines", nargs="+", metavar="NAME=DOCKER_HOST")
    args = parser.parse_args(argv)
    import docker

    until = time.time()
    for spec in args.engines:
        name, sep, host = spec.partition("=")
        if not sep or not host:
            print(f"error: engine_counts: {spec!r}: expected NAME=DOCKER_HOST", file=sys.stderr)
            return 2
        try:
            client = docker.DockerClient(base_url=host, timeout=60)
            events = list(client.events(since=int(args.since), until=int(until) + 1, decode=True))
            client.close()
        except Exception as exc:  # noqa: BLE001 - any failure to read is reported, never a zero
            print(f"error: engine_counts: {name} ({host}): events not read: {exc}", file=sys.stderr)
            return 1
        print(line(name, count(events)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
