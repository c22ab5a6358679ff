"""THE table of build backends: every name, what each can do, which options only it understands, where it lives.

Every reader of a backend's name reads it here (the CLI's `--backend` choices, the matrix's `backend` key, the renderer,
the pipeline, the record and the reports), so a new backend is its folder under builder/backends/ and one row of
`BACKENDS`. The table is data only (foundation layer): validate, plan and render read it without loading the engine
SDK or the builder; builder/backends/__init__.py imports a row's `module` when a run builds with it.

The backend is a rendering input, not only a build option: templates ask for *features* (`features.cache_mounts`,
`features.build_secrets`), never for a name, so a plan rendered for one backend is built by a backend with the same
features. Which backend a plan renders for: `--backend` (BuildInputs.backend), else the matrix's `backend`, else
`auto`; `auto` is a choice, never a rendering input: the pipeline resolves it to a row before anything renders
(pipeline/backend_choice.py) and records the row's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagebuild.errors import UsageError
from imagebuild.inputs import BuildInputs
from imagebuild.models import Plan, ResolvedVariant


@dataclass(frozen=True)
class Features:
    """What a backend's builds can use; the templates branch on these (`features.<name>`), never on its name.

    cache_mounts: `RUN --mount=type=cache` (pip's download cache, which never reaches a layer);
    build_secrets: `RUN --mount=type=secret` (index URLs with credentials, never a build argument);
    named_contexts: a parent given as an exact image (a child builds on its parent's image ID);
    other_platforms: builds images of another platform than the engine's (`--platform`, natively on a builder's node
    of that platform or through QEMU); without it a plan of another platform is refused before anything builds;
    linked_copies: `COPY --link` for a stage's /opt/stage: the layer holds exactly the stage's files, whatever the
    parent holds. Without it BuildKit diffs the copy against the parent's snapshot and leaves out a file equal to the
    parent's in content and date: a loaded parent (dates clamped by rewrite-timestamp) and the same parent unexported
    inside one bake (dates not yet clamped) then give two different layers from one input."""

    cache_mounts: bool = False
    build_secrets: bool = False
    named_contexts: bool = False
    other_platforms: bool = False
    linked_copies: bool = False


@dataclass(frozen=True)
class RunOption:
    """A run option that only one backend understands. `imagebuild build` gets a flag per row option
    (commands/build.py builds them from this table), the value reaches the row's plug-in as `settings[setting]`
    (BuildSettings.backend_options), and any other backend refuses it in one line (pipeline/building.py)."""

    setting: str  # the key in the plug-in's settings
    flag: str  # the CLI flag
    metavar: str
    help: str


@dataclass(frozen=True)
class BackendSpec:
    name: str
    title: str  # as a line names it: "building with <title>"
    summary: str  # one line for --help and the docs
    features: Features
    module: str  # the plug-in: a module with `preflight(options, store, say)` (builder/backends/__init__.py)
    options: tuple[RunOption, ...] = ()  # options only this backend understands: refused with any other


AUTO = "auto"  # the default: the first row of AUTO_ORDER that answers here (its plug-in's `answers()`)
CLASSIC, BUILDKIT = "classic", "buildkit"

BACKENDS: dict[str, BackendSpec] = {spec.name: spec for spec in (
    BackendSpec(CLASSIC, "the classic builder", "the engine's classic builder through the SDK (any engine; deprecated by Docker)",
                Features(), "imagebuild.builder.backends.classic"),
    BackendSpec(BUILDKIT, "BuildKit", "BuildKit through `docker buildx build` (engine >= 23 or a buildx builder)",
                Features(cache_mounts=True, build_secrets=True, named_contexts=True, other_platforms=True,
                         linked_copies=True),
                "imagebuild.builder.backends.buildkit",
                options=(RunOption("builder", "--builder", "NAME",
                                   "The buildx builder (BuildKit's option: chooses BuildKit under the default auto, "
                                   "refused with --backend classic; default: buildx's current one, the engine's)."),
                         RunOption("buildkit_cache", "--buildkit-cache", "REPOSITORY",
                                   "BuildKit's option (as --builder): import and export a registry cache of every "
                                   "stage, one tag per image (needs the engine's containerd image store or a "
                                   "non-docker builder)."))),
)}

AUTO_ORDER = (BUILDKIT, CLASSIC)  # auto: BuildKit where it answers, else the classic builder (which always can)
OFFLINE = CLASSIC  # what `auto` renders as where no engine is asked and no record says (render, plan, lock)


def choices() -> list[str]:
    """The names a user may give (`--backend`, the matrix's `backend`): auto first, then the table's rows."""
    return [AUTO, *BACKENDS]


def spec(name: str) -> BackendSpec:
    """The row of a concrete backend; UsageError naming the choices for anything else (`auto` included: it must be
    resolved before anything renders or builds)."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise UsageError(f"unknown build backend {name!r}; choices: {', '.join(BACKENDS)}") from None


def backend_of(variant: ResolvedVariant, inputs: BuildInputs) -> str:
    """The concrete backend an image renders for. `auto` that the pipeline did not resolve (render, plan, lock, and
    test/push of a record written before backends were recorded, which built with the classic builder) renders as
    OFFLINE: what is rendered never depends on which engine DOCKER_HOST names."""
    name = inputs.backend or variant.backend
    return OFFLINE if name == AUTO else name


def plan_backend(plan: Plan, inputs: BuildInputs) -> str:
    """The one backend of a run; a matrix whose rows name different backends needs `--backend`."""
    chosen = sorted({backend_of(img.variant, inputs) for img in plan.images}) or [OFFLINE]
    if len(chosen) > 1:
        raise UsageError(f"the matrix's rows name different backends ({', '.join(chosen)}); one run builds with "
                         "one: choose it with --backend")
    return chosen[0]
