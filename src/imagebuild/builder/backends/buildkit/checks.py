"""Before anything builds: can the chosen buildx builder build this plan? One `error:` line when it cannot.

Checked in this order, each answer one line:
- no buildx plugin: `make install` puts buildx 0.13.1 under .tools/docker-config/cli-plugins (DOCKER_CONFIG);
- a `--builder` that does not exist or does not answer: the line says what `docker buildx ls` shows;
- a builder whose BuildKit lacks named contexts (the frontend capability moby.buildkit.frontend.contexts, BuildKit
  v0.10+), which the backend needs to build a child on its parent's image ID: Debian 12's dockerd 20.10 embeds
  BuildKit v0.8. The engine's embedded BuildKit reports no usable version (Debian's 26.1 says v0.0.0+unknown), so for
  the docker driver the engine version decides (Docker Engine 23.0 embeds BuildKit 0.11).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from imagebuild.engine import cli
from imagebuild.errors import UsageError

if TYPE_CHECKING:
    from imagebuild.builder.backends.buildkit.build import BuildxBackend

MIN_ENGINE = (23, 0)  # Docker Engine with named contexts in its embedded BuildKit
MIN_BUILDKIT = (0, 10)  # BuildKit with named contexts (moby.buildkit.frontend.contexts)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


class BuilderUnavailable(UsageError):
    """The BuildKit backend cannot build here (no plugin, no such builder, too old a BuildKit)."""


@dataclass(frozen=True)
class Builder:
    name: str
    driver: str
    status: str  # of its first node: running, inactive, error...
    buildkit: str  # BuildKit version of its first node ("" when not reported)


def parse_ls(text: str) -> list[Builder]:
    """`docker buildx ls --format json`: one JSON object per line."""
    builders: list[Builder] = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict) or not obj.get("Name") or any(b.name == obj["Name"] for b in builders):
            continue  # buildx 0.13.1 lists the docker driver's builder twice
        nodes = [n for n in obj.get("Nodes") or [] if isinstance(n, dict)]
        node = nodes[0] if nodes else {}
        builders.append(Builder(name=str(obj["Name"]), driver=str(obj.get("Driver", "")),
                                status=str(node.get("Status", "")), buildkit=str(node.get("Version", ""))))
    return builders


def version_tuple(text: str) -> tuple[int, int] | None:
    m = _VERSION.match(text.strip())
    return (int(m[1]), int(m[2])) if m else None


def _ls_summary(builders: list[Builder]) -> str:
    return ", ".join(f"{b.name} ({b.driver}, {b.status or 'unknown'})" for b in builders) or "no builders"


def check_named_contexts(builder: Builder, engine_version: str) -> None:
    """Fail when the builder's BuildKit cannot resolve named contexts."""
    if builder.driver == "docker":
        engine = version_tuple(engine_version)
        if engine is not None and engine < MIN_ENGINE:
            raise BuilderUnavailable(
                f"the engine's BuildKit lacks named contexts (moby.buildkit.frontend.contexts): Docker Engine "
                f"{engine_version} embeds a BuildKit older than v0.10 (20.10: v0.8), named contexts need Engine >= "
                f"{MIN_ENGINE[0]}.{MIN_ENGINE[1]}: start a modern engine (scripts/modern-engine.sh --fresh DIR) or "
                "build with --backend classic")
        return
    buildkit = version_tuple(builder.buildkit)
    if buildkit is not None and buildkit != (0, 0) and buildkit < MIN_BUILDKIT:
        raise BuilderUnavailable(
            f"buildx builder {builder.name!r} runs BuildKit {builder.buildkit}, which lacks named contexts "
            f"(BuildKit >= v{MIN_BUILDKIT[0]}.{MIN_BUILDKIT[1]}): update it or build with --backend classic")


def check_cache_export(builder: Builder, driver_status: str) -> None:
    """The docker driver exports a registry cache only from the containerd image store (Docker's cache docs)."""
    if builder.driver == "docker" and not containerd_store(driver_status):
        raise BuilderUnavailable(
            "--buildkit-cache: the engine's docker driver cannot export a registry cache without the containerd "
            "image store; start the engine with {\"features\": {\"containerd-snapshotter\": true}} "
            "(scripts/modern-engine.sh does) or name a docker-container/remote --builder")


def preflight(builder_name: str | None = None, cache_repository: str | None = None) -> BuildxBackend:
    """The BuildKit backend for `builder_name` (None: buildx's current builder), or one BuilderUnavailable line."""
    # the backend itself (build.py and its command line, progress and diagnosis readers) only once it is made:
    # `auto` asks answers() only, and a no-op defers this preflight (DeferredBackend)
    from imagebuild.builder.backends.buildkit.build import BuildxBackend

    version = cli.buildx_version()
    if not version.ok:
        raise BuilderUnavailable(
            "the BuildKit backend needs the docker buildx plugin and `docker buildx` does not run: `make install` "
            "puts buildx 0.13.1 under .tools/docker-config/cli-plugins (then export DOCKER_CONFIG=.tools/docker-config)"
            ", or use --backend classic")
    listed = cli.run(["buildx", "ls", "--format", "json"])
    builders = parse_ls(listed.stdout) if listed.ok else []
    if builder_name is None:
        current = cli.run(["buildx", "inspect"])
        name = next((ln.split(":", 1)[1].strip() for ln in current.stdout.splitlines()
                     if ln.startswith("Name:")), "default")
    else:
        name = builder_name
    chosen = next((b for b in builders if b.name == name), None)
    if chosen is None:
        raise BuilderUnavailable(f"there is no buildx builder {name!r}; `docker buildx ls` shows: "
                                 f"{_ls_summary(builders)}")
    answer = cli.run(["buildx", "inspect", "--bootstrap", name], purpose="bootstrap")
    if not answer.ok:
        raise BuilderUnavailable(f"buildx builder {name!r} does not answer ({answer.reason}); `docker buildx ls` shows: "
                                 f"{_ls_summary(builders)}")
    check_named_contexts(chosen, cli.engine_version().out)
    driver_status = cli.driver_status()
    if cache_repository:
        check_cache_export(chosen, driver_status)
    return BuildxBackend(builder=builder_name, docker_driver=chosen.driver == "docker",
                         cache_repository=cache_repository, containerd_store=containerd_store(driver_status),
                         platforms=inspect_platforms(answer.stdout))


def inspect_platforms(text: str) -> tuple[str, ...]:
    """The platforms of every node `docker buildx inspect` lists (`Platforms: linux/amd64, linux/arm64*`; a `*`
    marks one the node was created with)."""
    found: list[str] = []
    for line in text.splitlines():
        if line.strip().startswith("Platforms:"):
            for item in line.split(":", 1)[1].split(","):
                name = item.strip().rstrip("*")
                if name and name not in found:
                    found.append(name)
    return tuple(found)


def answers() -> tuple[bool, str]:
    """For `--backend auto`: whether BuildKit builds here without options (the engine's docker driver), and one
    phrase saying why: an engine >= 23 (named contexts) and a buildx plugin that runs."""
    engine = cli.engine_version()
    version = engine.out
    if not engine.ok or not version:
        return False, f"`docker version` names no engine ({engine.reason})"
    number = version_tuple(version)
    if number is not None and number < MIN_ENGINE:
        return False, (f"dockerd {version}: its BuildKit lacks named contexts (Docker Engine >= "
                       f"{MIN_ENGINE[0]}.{MIN_ENGINE[1]})")
    buildx = cli.buildx_version()
    if not buildx.ok:
        return False, (f"dockerd {version} without the buildx plugin (`make install` puts buildx under "
                       ".tools/docker-config; export DOCKER_CONFIG=.tools/docker-config)")
    words = buildx.stdout.split()
    return True, f"dockerd {version} with buildx {words[1] if len(words) > 1 else '(version unknown)'}"


def containerd_store(driver_status: str) -> bool:
    """Whether the engine keeps its images in the containerd image store (`docker info`'s DriverStatus names the
    snapshotter): its docker driver can then export archives and registry caches."""
    return "io.containerd.snapshotter" in driver_status
