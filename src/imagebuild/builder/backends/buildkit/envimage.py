"""The runtime's env stage as an image of its own (issue 44: a one-package rebuild re-exports only what changed).

BuildKit's exporter re-dates (rewrite-timestamp) and writes again every layer of an image, cached or not; it skips
only the layers of the base image its frontend names, and BuildKit 0.13's Dockerfile frontend names none behind a
named context (the parent's, argv.py). So the runtime re-dated and re-exported its unchanged compilers and torch
tiers on every matrix edit (the CUDA 13 runtime: ~5 GB, 49-72 s of re-timestamping and ~85 s of export for a 4 s pip
step). The runtime's Dockerfile therefore puts what a
matrix edit leaves alone in a stage of its own (render/tiers.py: ENV_STAGE, the compilers and the tiers below the
matrix's packages) that the final stage is `FROM ${ENV_IMAGE}`; one build (the classic builder, `buildx bake`)
builds it in line, and this backend builds it as an image of its own, found again by a key:

1. `--target env-key --output type=local`: the env tiers' pinned lists, as the resolve stage wrote them (a few KB;
   the resolve runs here, or is the build cache's);
2. the key (`env_key`): those lists, the text of the env stage and of every stage it copies from, the values of the
   build arguments those stages declare (never a secret's), the context files they copy, the parent's image ID and
   the platform. The engine's `imagebuild-env:<key>` is the env image when it is there; else it is built
   (`--target env`, exported with the image's own options, re-dated as any export, loaded, tagged by the key);
3. the image itself, with `ENV_IMAGE` the env image's plain tag (the docker driver finds it in the engine's store;
   the frontend then names it as the base image and the export leaves its layers alone), and the manifest then
   marked as one build marks it (`annotate_like_one_build`, below).

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

from imagebuild.engine import held
from imagebuild.plan.hashing import dir_digest
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
    found = stages(dockerfile)
    names = {s.name for s in found}
    return ENV_STAGE in names and ENV_KEY_STAGE in names and found[-1].parent == "${" + ENV_ARG + "}"


def env_closure(dockerfile: str) -> list[Stage]:
    """The env stage and every stage it is built from (FROM a stage, COPY --from=stage), in Dockerfile order; the
    resolve stage's output stands in the key as the env-key files, not as its text."""
    found = stages(dockerfile)
    named = {s.name: s for s in found}
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
    return [s for s in found if s.name in wanted]


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
        elif source in context_dirs:  # the wheelhouse, te-wheels: the plan's digest (its files' cached sha256)
            files[source] = dir_digest(context_dirs[source])
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


def short_tag(ref: str) -> str:
    """An env image's tag as the build report shows it: imagebuild-env:<the key's first 12 hex digits>."""
    return ref[:len(ENV_REPOSITORY) + 13]


# -- the image's manifest as one build writes it ---------------------------------------------------------------------
# BuildKit annotates each layer its export re-dated; with the env image as the final stage's FROM image (a plain tag
# in the engine's store: the frontend then knows its layers and the exporter skips them), the env image's layers are
# not re-dated again and carry no annotation, where one build (env stage in line: every layer re-dated) annotates
# every layer. The layers and the config are the same bytes; the manifest differs by exactly these annotations, so
# the backend adds them to the env image's layers in the exported layout (nothing else changes; the image ID is
# then the one build's manifest digest: tests/integration/test_buildkit_backend.py proves it against a real bake).
REWRITTEN = "buildkit/rewritten-timestamp"


class ManifestNotAsExpected(ValueError):
    """The exported manifest is not what `annotate_like_one_build` can rewrite byte for byte (another format, another
    layout): the backend builds the image as before instead (the env image as a named context, all re-dated)."""


def one_build_manifest(raw: bytes, env_layers: int) -> bytes:
    """`raw` (the exported manifest) with its first `env_layers` layers annotated as re-dated, with the epoch the
    others carry, written as BuildKit writes a manifest (Go's two-space MarshalIndent, no final newline)."""
    try:
        manifest = json.loads(raw)
    except ValueError:
        raise ManifestNotAsExpected("the exported manifest is not JSON") from None
    if json.dumps(manifest, indent=2).encode() != raw:
        raise ManifestNotAsExpected("the exported manifest is not written as this backend writes it again")
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    if not isinstance(layers, list) or not 0 < env_layers < len(layers) or not all(isinstance(x, dict) for x in layers):
        raise ManifestNotAsExpected(f"the exported manifest has no layers above the env image's {env_layers}")
    epochs = {(x.get("annotations") or {}).get(REWRITTEN) for x in layers[env_layers:]}
    below = [(x.get("annotations") or {}).get(REWRITTEN) for x in layers[:env_layers]]
    if len(epochs) != 1 or None in epochs or any(b is not None for b in below):
        raise ManifestNotAsExpected("the exported layers are not re-dated above the env image's alone")
    [epoch] = epochs
    for layer in layers[:env_layers]:
        layer["annotations"] = {**(layer.get("annotations") or {}), REWRITTEN: epoch}
    return json.dumps(manifest, indent=2).encode()


def annotate_like_one_build(layout: Path, digest: str, env_diff_ids: list[str]) -> str:
    """The exported manifest `digest` of the layout (engine/held.py) written again by `one_build_manifest` as a blob
    of its own, once its config says the image stands on the env image (`env_diff_ids`, the engine's): nothing else is
    copied or changed. The new manifest's digest (the image ID once loaded); ManifestNotAsExpected otherwise."""
    with held.LayoutImage(layout / "index.json", layout) as image:
        try:
            raw = held.read_blob(image, digest, 1 << 20)
            config_ref = json.loads(raw).get("config") or {}
            config = json.loads(held.read_blob(image, str(config_ref.get("digest")), 4 << 20, config_ref.get("size")))
        except (held.BlobProblem, ValueError, AttributeError, OSError) as exc:
            raise ManifestNotAsExpected(f"the exported manifest or config: {exc}") from None
    diff_ids = (config.get("rootfs") or {}).get("diff_ids") if isinstance(config, dict) else None
    if not isinstance(diff_ids, list) or diff_ids[:len(env_diff_ids)] != env_diff_ids:
        raise ManifestNotAsExpected("the exported image does not stand on the env image's layers")
    try:
        return held.add_blob(layout, one_build_manifest(raw, len(env_diff_ids)))
    except OSError as exc:
        raise ManifestNotAsExpected(f"the rewritten manifest cannot be written: {exc}") from None
