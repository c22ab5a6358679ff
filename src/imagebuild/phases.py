"""Where an image's build time went: its phases, one typed row each (issue 44: rebuild only what changed).

    phases = [Phase("resolve", "[resolve 6/6] RUN ... imagebuild-tiers.py ...", 41.2, cached=False), ...]
    row["phases"] = [p.to_json() for p in phases]                  # build-report.json: images[n].phases
    phases = phases_from_json(row["phases"], "build-report.json: images[2].phases")   # PhaseError when damaged

The backends measure what they see (builder/backends/*: BuildKit's vertex and status times from its rawjson
progress, the classic builder's `Step N/M` lines timed as they arrive), the executor adds what happens around the
build (builder/one_image.py), the pipeline what happens after it (SBOM, diff, tests); the report shows them
(report/writer.py) and reads them back typed. KINDS names each kind of phase:

- base:        a parentless image's OS image: bootstrapped or pulled (once per run, bases.py) or found
- prepare:     BuildKit's build definition, metadata and context transfer (one row: the span they took together)
- resolve:     a Dockerfile step of the `resolve` stage (the environment resolved once: render/tiering.py)
- step:        any other Dockerfile step; `cached` says whether the build cache gave it
- export:      BuildKit's export (layers, manifest, config, naming, unpacking, the archive), the archive's load into
               the engine; the classic builder's tagging after its last step (each classic step commits its own)
- retimestamp: BuildKit's `rewriting layers with source-date-epoch` (rewrite-timestamp on the containerd store);
               the classic builder has none (its pip steps date their files themselves)
- cache:       a registry cache imported or exported (build --registry-cache, --buildkit-cache)
- te-wheel:    the transformer_engine wheel, from its cache or built (builder/te_cache.py)
- env:         the runtime's env image (the compilers and the tiers below the matrix's packages: BuildKit builds it
               as an image of its own, builder/backends/buildkit/envimage.py): taken again by its key (cached) or
               built, the seconds its key and build took (its own steps and export are rows of their own)
- compare:     a rebuild compared with the image its tag named before (builder/reproduced.py)
- up-to-date:  the up-to-date test that found the image already there (nothing built)
- sbom, diff:  the SBOM made or taken from the kept copy, the diff against the image before (pipeline/supply.py)
- tests:       the smoke tests (a result reused from the record: 0 s, cached)

A phase's seconds may overlap another's (BuildKit runs independent stages at once): the phases say where time went,
their sum is not the build's wall time (`build_seconds`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from imagebuild.errors import UsageError

PHASES_KEY = "phases"  # the key of a build-report.json row that holds them
KINDS = ("base", "prepare", "resolve", "step", "export", "retimestamp", "cache", "te-wheel", "env", "compare", "up-to-date", "sbom",
         "diff", "tests")
STEP_KINDS = ("resolve", "step")  # Dockerfile steps (the only phases the build cache can give)


class PhaseError(UsageError):
    """A stored phase that cannot be read (exit 2, one line naming where it came from and the key)."""


@dataclass(frozen=True)
class Phase:
    """One phase of one image's build: what kind (KINDS), what it was ("[tier-torch 4/5] RUN pip install ...",
    "exporting layers"), how many seconds it took (None: not measured) and, for a Dockerfile step, whether the build
    cache gave it (None: not a step, or not said)."""

    kind: str
    name: str
    seconds: float | None
    cached: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name,
                "seconds": None if self.seconds is None else round(self.seconds, 3), "cached": self.cached}

    @classmethod
    def from_json(cls, doc: object, where: str) -> Phase:
        """A stored phase; PhaseError naming `where` and the key when it is not one this tool wrote."""
        if not isinstance(doc, dict):
            raise PhaseError(f"{where}: expected an object, found {_shown(doc)}")
        kind, name = doc.get("kind"), doc.get("name")
        if not isinstance(kind, str) or not kind:
            raise PhaseError(f"{where}.kind: expected a string, found {_shown(kind)}")
        if not isinstance(name, str):
            raise PhaseError(f"{where}.name: expected a string, found {_shown(name)}")
        seconds = doc.get("seconds")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                    or seconds < 0 or seconds != seconds or seconds == float("inf")):
            raise PhaseError(f"{where}.seconds: expected a number >= 0 or null, found {_shown(seconds)}")
        cached = doc.get("cached")
        if cached is not None and not isinstance(cached, bool):
            raise PhaseError(f"{where}.cached: expected true/false or null, found {_shown(cached)}")
        # a kind this version does not know (a newer imagebuild's) is shown as it is, never refused
        return cls(kind=kind, name=name, seconds=None if seconds is None else float(seconds), cached=cached)


def phases_from_json(doc: object, where: str) -> list[Phase]:
    """A row's stored phases (None or missing: an older report, no phases); PhaseError when damaged."""
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise PhaseError(f"{where}: expected a list, found {_shown(doc)}")
    return [p if isinstance(p, Phase) else Phase.from_json(p, f"{where}[{n}]") for n, p in enumerate(doc)]


def phases_to_json(phases: Iterable[Phase]) -> list[dict[str, Any]]:
    return [p.to_json() for p in phases]


def _shown(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "a list"
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
