"""Before anything builds: can this engine and builder make every selected image's platform? One `error:` line.

- the classic builder builds the engine's own platform only (Docker's classic builder has no cross-platform build);
- BuildKit builds another platform natively on a `--builder` whose nodes have it (CoreWeave's mixed amd64 + arm64
  builder), or on the engine's docker driver through QEMU: that needs the binfmt_misc handler with the F flag
  (scripts/binfmt.sh), and so does the bootstrap of an arm64 root filesystem, which mmdebstrap runs on this host;
- a compiled CUDA extension (the transformer_engine wheel) of a platform marked compile_native_only in
  compat/data/platforms.yaml is built only on a native builder: under QEMU it would take hours.
"""

from __future__ import annotations

from pathlib import Path

from imagebuild.compat import Tables
from imagebuild.errors import UsageError
from imagebuild.host.binfmt import missing_emulation
from imagebuild.models import ImagePlan


class PlatformUnavailable(UsageError):
    """The selected images need a platform this engine/builder cannot build (exit 2, nothing built)."""


def engine_platform(tables: Tables, machine: str | None) -> str:
    """`x86_64` -> linux/amd64 (the engine's `docker info` Architecture); unknown or None: the default platform."""
    return tables.machine_platform(machine) or tables.default_platform


def _listed(images: list[ImagePlan]) -> str:
    names = [i.short_tag for i in images]
    return ", ".join(names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "")


def check_platforms(selected: list[ImagePlan], tables: Tables, engine: str, buildkit: bool, builder: str | None,
                    builder_platforms: tuple[str, ...] = (), docker_driver: bool = True,
                    root: Path = Path("/")) -> None:
    """Raise PlatformUnavailable naming the first platform the run cannot build, and how to make it buildable."""
    by_platform: dict[str, list[ImagePlan]] = {}
    for img in selected:
        by_platform.setdefault(img.variant.platform, []).append(img)
    for platform, images in by_platform.items():
        if platform == engine:
            continue
        info = tables.platforms.get(platform)
        uname = info.uname if info else platform.split("/")[1]
        if not buildkit:
            raise PlatformUnavailable(
                f"the classic builder builds only the engine's platform ({engine}); {len(images)} selected image(s) "
                f"are {platform} ({_listed(images)}): build them with --backend buildkit, or leave them out with "
                "--only")
        native = builder is not None and not docker_driver and platform in builder_platforms
        if builder is not None and platform not in builder_platforms:
            raise PlatformUnavailable(
                f"buildx builder {builder!r} has no {platform} node (it lists {', '.join(builder_platforms) or 'none'})"
                f": append one (docker buildx create --append --name {builder} --platform {platform} <endpoint>), or "
                f"build {platform} here under QEMU without --builder (scripts/binfmt.sh)")
        bootstraps = [i for i in images if i.parent is None and i.variant.base.kind == "bootstrap"]
        if not native or bootstraps:
            why = missing_emulation(uname, root)
            if why:
                need = "its root filesystem bootstrap" if native else "QEMU emulation"
                raise PlatformUnavailable(
                    f"{platform} images ({_listed(images)}) on this {engine} machine need {need}, but {why}: run "
                    f"`sudo scripts/binfmt.sh {uname}` (registers QEMU 10 from Debian trixie as the handler, with the "
                    f"F flag), or name a buildx builder with a native {platform} node: --builder NAME")
        compiled = [i for i in images if i.te_wheel is not None]
        if compiled and not native and info is not None and info.compile_native_only:
            raise PlatformUnavailable(
                f"transformer_engine for {platform} ({_listed(compiled)}) compiles only on a native {platform} "
                f"builder (hours under QEMU): name one with --builder NAME, or leave those images out with --only")
