"""The `docker buildx build` command line for one BuildRequest (pure: no I/O, so every flag is unit-tested).

What the BuildKit backend asks of buildx, and why:
- `--progress rawjson`: BuildKit's machine-readable solve status (progress.py), never the human output.
- `--network host`: the engines this project starts have no bridge (`--bridge=none`); BuildKit's default network
  fails every RUN there ("network bridge not found").
- `--provenance=false --sbom=false`: one image manifest per image, as the classic builder writes; attestations would
  wrap it in an index and change the image ID the record keeps (the pipeline writes its own SBOM).
- the parent as a named context: BuildKit resolves `FROM sha256:<id>` on Docker Hub, so the Dockerfile's
  `FROM ${BASE_IMAGE}` gets BASE_IMAGE=<context name> and `--build-context <name>=docker-image://<pin tag>`, a tag
  the backend spells from the parent's image ID (build.py: BuildxBackend.parent_ref).
- credentials as build secrets read from the buildx process's environment (`--secret id=..,env=..`): never in the
  argv (visible in `ps`), never in a build argument (kept in the image history of BuildKit's cache).
- `rewrite-timestamp`: every file a step adds is dated SOURCE_DATE_EPOCH at most in the exported layers, so the same
  inputs give the same layers, hence the same image ID, on any engine. The docker driver's own exporter (the image
  straight into the engine's store) refuses that option (dockerd 26.1: its unpack is always on), so with the
  containerd image store the image is exported into the OCI layout kept beside the engine (`type=oci,tar=false`,
  engine/held.py: BuildKit writes only the blobs the layout lacks), its manifest's descriptor read from buildx's
  `--metadata-file`, and the backend loads what the engine lacks (build.py); any other driver (docker-container,
  remote, kubernetes) loads its `type=docker` output into the engine itself. Only the docker driver without the
  containerd image store keeps build-time dates (its image exporter is the only one it has).
- the runtime's env stage as an image of its own (envimage.py): `--target env-key` exported as files (its key),
  `--target env` exported as an image when the engine has none of that key, then the image with ENV_IMAGE that env
  image's plain tag (the docker driver finds it in the engine's store). Unlike a named context (the parent's: BuildKit
  0.13's frontend then knows no base image), a plain tag tells the exporter the env image's layers, and it does not
  re-date and write them again.
- `compression=zstd` (level 3, forced on every layer, OCI media types) wherever the output is such an export
  (EXPORT_OPTIONS): BuildKit's rewrite inflates and compresses every layer of the image again on every export, the
  unchanged ones too (its converter's skip keys on the input blob, never the rewritten one), and the engine unpacks
  them again on load; in zstd that costs the CPU runtime 25 + 20 + 23 s where gzip cost 55 + 60 + 28 s (the export,
  the rewrite, the load: bench/loop-cpu.md). The engine then holds exactly the zstd blobs a push sends, so the push
  sends them as they are (push/asheld.py) and the registry's digest is the image ID the build made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from imagebuild.builder.backends.buildkit.envimage import ENV_CONTEXT
from imagebuild.render.tiers import ENV_ARG

BASE_CONTEXT = "imagebuild-base"  # the named context that stands for the parent image
SECRET_ENV_PREFIX = "IMAGEBUILD_SECRET_"
# the exporter's options wherever the image is exported, not stored by the engine (module doc): dates clamped, zstd
EXPORT_OPTIONS = ("rewrite-timestamp=true,compression=zstd,compression-level=3,force-compression=true,"
                  "oci-mediatypes=true")


def secret_id(build_arg: str) -> str:
    """The build secret a credentialed build argument becomes: PIP_EXTRA_INDEX_URL -> pip_extra_index_url."""
    return build_arg.lower()


@dataclass(frozen=True)
class BuildxCall:
    """Everything one build needs besides the request's own args and labels."""

    context_dir: Path  # the request's context tar, extracted
    dockerfile: str  # path inside context_dir
    tag: str
    build_args: Mapping[str, str]  # plain build arguments (no credentials)
    labels: Mapping[str, str]
    secrets: tuple[str, ...] = ()  # build-arg names sent as secrets (values in the process environment)
    base_ref: str | None = None  # the parent's pin tag in the engine's store, when BASE_IMAGE is an image ID
    builder: str | None = None  # buildx builder name; None: the current one (the engine's docker driver)
    docker_driver: bool = True
    layout: Path | None = None  # the docker driver with the containerd image store: export into this OCI layout
    metadata: Path | None = None  # buildx's --metadata-file (the exported manifest's descriptor)
    extra_flags: tuple[str, ...] = field(default_factory=tuple)  # cache import/export (--cache-from/--cache-to)
    platform: str | None = None  # --platform: the image's OS/architecture (None: the builder's own)
    target: str | None = None  # --target: a stage of the Dockerfile (the runtime's env and env-key: envimage.py)
    local_dest: Path | None = None  # export the target's files here (type=local) instead of an image
    env_ref: str | None = None  # the env image's tag in the engine's store, for the final stage's ENV_IMAGE
    env_by_context: bool = False  # pass it as a named context (every layer re-dated) instead of the plain tag


def buildx_argv(call: BuildxCall) -> list[str]:
    """The arguments to the docker CLI (engine/cli.py adds the binary): `buildx build ... CONTEXT`."""
    argv = ["buildx", "build"]
    if call.builder:
        argv += ["--builder", call.builder]
    if call.platform:  # the parent's named context resolves to that platform's image too
        argv += ["--platform", call.platform]
    argv += ["--progress", "rawjson", "--network", "host", "--provenance=false", "--sbom=false",
             "--file", str(call.context_dir / call.dockerfile)]
    if call.tag:  # none for files exported (the env-key stage)
        argv += ["--tag", call.tag]
    args = dict(call.build_args)
    for name in call.secrets:
        args.pop(name, None)
    if call.target:
        argv += ["--target", call.target]
    if call.base_ref is not None:
        args["BASE_IMAGE"] = BASE_CONTEXT
        argv += ["--build-context", f"{BASE_CONTEXT}=docker-image://{call.base_ref}"]
    if call.env_ref is not None and call.env_by_context:
        args[ENV_ARG] = ENV_CONTEXT
        argv += ["--build-context", f"{ENV_CONTEXT}=docker-image://{call.env_ref}"]
    elif call.env_ref is not None:  # a plain tag: the frontend knows its layers, the export skips them (envimage.py)
        args[ENV_ARG] = call.env_ref
    for name in sorted(args):
        argv += ["--build-arg", f"{name}={args[name]}"]
    for name in sorted(call.labels):
        argv += ["--label", f"{name}={call.labels[name]}"]
    for name in (n for n in call.secrets if n in call.build_args):
        argv += ["--secret", f"id={secret_id(name)},env={SECRET_ENV_PREFIX}{name}"]
    if call.local_dest is not None:
        argv += ["--output", f"type=local,dest={call.local_dest}"]
    elif call.layout is not None:
        argv += ["--output", f"type=oci,tar=false,dest={call.layout},{EXPORT_OPTIONS}"]
    elif not call.docker_driver:
        argv += ["--output", f"type=docker,{EXPORT_OPTIONS}"]
    if call.metadata is not None:
        argv += ["--metadata-file", str(call.metadata)]
    argv += list(call.extra_flags)
    argv.append(str(call.context_dir))
    return argv


def secret_env(build_args: Mapping[str, str], secrets: tuple[str, ...]) -> dict[str, str]:
    """The environment entries that carry the secrets' values to buildx (only those the request has)."""
    return {f"{SECRET_ENV_PREFIX}{name}": build_args[name] for name in secrets if name in build_args}
