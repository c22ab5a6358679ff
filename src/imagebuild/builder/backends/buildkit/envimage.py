"""The runtime's env stage as an image of its own (issue 44: a one-package rebuild re-exports only what changed).

BuildKit's exporter re-dates (rewrite-timestamp) and writes again every layer of an image above its `FROM` image;
it skips only the layers of the image the final stage stands on. A runtime whose final stage stood on the base
re-dated and re-exported its unchanged compilers and torch tiers on every matrix edit (the CUDA 13 runtime: ~5 GB,
49-72 s of re-timestamping and ~85 s of export for a 4 s pip step). The runtime's Dockerfile therefore puts what a
matrix edit leaves alone in a stage of its own (render/tiers.py: ENV_STAGE, the compilers and the tiers below the
matrix's packages) that the final stage is `FROM ${ENV_IMAGE}`; one build (the classic builder, `buildx bake`)
builds it in line, and this backend builds it as an image of its own, found again by a key:

1. `--target env-key --output type=local`: the env tiers' pinned lists, as the resolve stage wrote them (a few KB;
   the resolve runs here, or is the build cache's);
2. the key (`env_key`): those lists, the text of the env stage and of every stage it copies from, the values of the
   build arguments those stages declare (never a secret's), the context files they copy, the parent's image ID and
   the platform. The engine's `imagebuild-env:<key>` is the env image when it is there; else it is built
   (`--target env`, exported with the image's own options, re-dated as any export, loaded, tagged by the key);
3. the image itself, with `ENV_IMAGE` the named context of that env image: its export skips the env image's layers.

Each layer is the same bytes either way (the re-dating of a layer depends on its contents only; the tier copies are
`COPY --link` on BuildKit), so the image ID is the one a single build makes: `imagebuild bake` and this backend
agree (tests/integration/test_buildkit_backend.py), and the key never decides what an image holds, only whether an
env image already made from the same inputs is taken again.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from imagebuild.render.tiers import ENV_ARG, ENV_KEY_STAGE, ENV_STAGE

ENV_REPOSITORY = "imagebuild-env"  # the engine's tag of an env image: imagebuild-env:<key>
ENV_CONTEXT = "imagebuild-env-image"  # the named context ENV_IMAGE names when the env image is passed in
_FROM = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(?P<image>\S+)(?:\s+AS\s+(?P<name>\S+))?\s*$", re.I)
_COPY_FROM = re.compile(r"--from=(?P<stage>[^\s]+)")
_ARG = re.compile(r"^ARG\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)", re.I)
_COPY = re.compile(r"^(?:COPY|ADD)\s+(?P<rest>.*)$", re.I)


@dataclass(frozen=True)
class Stage:
    name: str
    parent: str  # what its FROM names (a stage, ${BASE_IMAGE}, scratch)
    text: str  # every line of the stage, continuation lines joined as written


def stages(dockerfile: str) -> list[Stage]:
    """The Dockerfile's stages in order (the global ARGs before the first FROM are not a stage)."""
    found: list[Stage] = []
    name = parent = None
    lines: list[str] = []
    for line in dockerfile.splitlines():
        m = _FROM.match(line.strip())
        if m:
            if name is not None and parent is not None:
                found.append(Stage(name, parent, "\n".join(lines)))
            name, parent, lines = m["name"] or f"stage-{len(found)}", m["image"], []
        if name is not None:
            lines.append(line)
    if name is not None and parent is not None:
        found.append(Stage(name, parent, "\n".join(lines)))
    return found


def splits(dockerfile: str) -> bool:
    """Whether the Dockerfile has an env stage the final stage stands on through ENV_ARG (the runtime's)."""
    if f"ARG {ENV_ARG}={ENV_STAGE}" not in dockerfile.splitlines():
        return False
    named = {s.name: s for s in stages(dockerfile)}
    found = stages(dockerfile)
    return (ENV_STAGE in named and ENV_KEY_STAGE in named and bool(found)
            and found[-1].parent == "${" + ENV_ARG + "}")


def env_closure(dockerfile: str) -> list[Stage]:
    """The env stage and every stage it is built from (FROM a stage, COPY --from=stage), in Dockerfile order; the
    resolve stage's output stands in the key as the env-key files, not as its text."""
    named = {s.name: s for s in stages(dockerfile)}
    wanted: set[str] = set()
    todo = [ENV_STAGE]
    while todo:
        name = todo.pop()
        if name in wanted or name not in named or name == "resolve":
            continue
        wanted.add(name)
        stage = named[name]
        todo.append(stage.parent)
        todo += [m["stage"] for m in _COPY_FROM.finditer(stage.text)]
    return [s for s in stages(dockerfile) if s.name in wanted]


def _copied_sources(text: str) -> list[str]:
    """The context paths a stage's COPY/ADD lines read (not --from ones): every word but the options and the last."""
    sources: list[str] = []
    joined = text.replace("\\\n", " ")
    for line in joined.splitlines():
        m = _COPY.match(line.strip())
        if not m or "--from=" in m["rest"]:
            continue
        words = [w for w in m["rest"].split() if not w.startswith("--")]
        sources += words[:-1]
    return sources


def _tree(folder: Path) -> list[list[object]]:
    """A host folder the context carries (the wheelhouse, te-wheels), as its files' paths, sizes and sha256."""
    out: list[list[object]] = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        out.append([str(path.relative_to(folder)), path.stat().st_size, digest.hexdigest()])
    return out


def env_key(dockerfile: str, key_files: Mapping[str, bytes], build_args: Mapping[str, str], secrets: tuple[str, ...],
            parent_id: str, platform: str, context_files: Mapping[str, bytes],
            context_dirs: Mapping[str, Path]) -> str:
    """The env image's key (module doc, 2): a sha256 over everything the env stage's bytes follow from."""
    closure = env_closure(dockerfile)
    # comments and blank lines build nothing (and the comment above a stage's FROM is read as the stage before's)
    text = "\n".join(line for s in closure for line in s.text.splitlines()
                     if line.strip() and not line.lstrip().startswith("#"))
    declared = sorted({m["name"] for line in text.splitlines() if (m := _ARG.match(line.strip()))})
    args = {n: build_args.get(n) for n in declared if n not in secrets}
    files: dict[str, object] = {}
    for source in sorted({s.rstrip("/") for s in _copied_sources(text)}):
        if source in context_files:
            files[source] = hashlib.sha256(context_files[source]).hexdigest()
        elif source in context_dirs:
            files[source] = _tree(context_dirs[source])
        else:
            files[source] = sorted(
                [p, hashlib.sha256(b).hexdigest()] for p, b in context_files.items() if p.startswith(source + "/"))
    doc = {"stages": text, "key_files": {n: hashlib.sha256(b).hexdigest() for n, b in sorted(key_files.items())},
           "args": args, "secrets": sorted(n for n in declared if n in secrets), "parent": parent_id,
           "platform": platform, "context": files}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def read_key_files(folder: Path) -> dict[str, bytes]:
    """What `--target env-key --output type=local,dest=folder` wrote: the env tiers' pinned lists."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def env_tag(key: str) -> str:
    return f"{ENV_REPOSITORY}:{key}"
