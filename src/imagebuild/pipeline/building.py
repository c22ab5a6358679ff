"""The build step: ask the registry which planned images it already holds (--registry-cache), ask every outside
source the rest need (preflight), then build through builder.build_plan. One row per planned image comes back, in
plan order, with the images the next steps may use (built or up to date in this engine)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from imagebuild import builder
from imagebuild.backends import AUTO, BACKENDS, plan_backend, spec
from imagebuild.builder import BuildOptions
from imagebuild.builder.backend import BuildBackend
from imagebuild.builder.backends import DeferredBackend, choose_auto, preflight
from imagebuild.builder.progress import Progress
from imagebuild.builder.remote import RegistryUnavailable, RemoteImage, find_in_registry
from imagebuild.builder.sources import blocked_tags, unreachable
from imagebuild.builder.uptodate import layers_of
from imagebuild.engine.store import as_store
from imagebuild.errors import EXIT_FAILED, UsageError
from imagebuild.inputs import BuildInputs
from imagebuild.models import FINE, HERE, BuildStatus, ImagePlan, ImageResult, Plan
from imagebuild.oci import resolve_auth
from imagebuild.pipeline.loaded import Say
from imagebuild.pipeline.located import locate
from imagebuild.pipeline.selection import Selection
from imagebuild.pipeline.settings import BuildSettings
from imagebuild.plan.cache import matrix_backends
from imagebuild.record import Record
from imagebuild.record.derived import Derived


class SourcesUnreachable(UsageError):
    exit_code = EXIT_FAILED


@dataclass
class BuildRun:
    results: list[ImageResult]  # one per planned image, plan order
    ready: list[ImagePlan] = field(default_factory=list)  # built or up to date in this engine: test/push use these
    ok: bool = True  # no image failed

    def by_tag(self) -> dict[str, ImageResult]:
        return {r.tag: r for r in self.results}


def locate_all(client: Any, selection: Selection, rec: Record | None) -> dict[str, str | None]:
    """tag -> the local image ID holding each selected image's inputs (None: not here): looked up once per run."""
    return {img.tag: locate(client, img, rec).image_id for img in selection.with_parents}


def registry_lookup(selection: Selection, here: dict[str, str | None], require: bool,
                    say: Say, pulls_zstd: bool = True,
                    layers: Callable[[str], list[str]] | None = None) -> dict[str, RemoteImage]:
    """--registry-cache: which selected images the registry already holds with exactly the planned inputs.

    Asked only when this engine lacks one of them (`here`, locate_all): a no-op makes no network request (a
    registry that does not resolve would cost every no-op its DNS time). `layers`: a local image ID's diff IDs (what a
    child in the registry must stand on when its parent is here)."""
    if all(here.values()):
        return {}

    def local_layers(img: ImagePlan) -> list[str] | None:
        image_id = here.get(img.tag)
        return layers(image_id) if image_id and layers else None

    try:
        return find_in_registry(selection.with_parents, resolve_auth, log=say, local_layers=local_layers,
                                pulls_zstd=pulls_zstd)
    except RegistryUnavailable as exc:
        if require:
            raise SourcesUnreachable(f"{exc} (--require-registry)") from None
        say(f"registry cache: {exc}; building locally")
        return {}


def preflight_sources(client: Any, plan: Plan, selection: Selection, keep_going: bool,
                      here: dict[str, str | None] | None, remote: dict[str, RemoteImage],
                      say: Say) -> tuple[Plan, list[ImageResult]]:
    """Ask every outside source the selected images need before anything builds (builder.sources).

    Images whose source does not answer are named one line each; without --keep-going that stops the run (exit 1,
    nothing built), with it they and their children become failed/not-built rows and the rest is built. `here`
    (locate_all; None with --force: every image is built) names the images already in this engine."""
    selected = selection.with_parents
    if here is not None:  # an image that is already here (or up to date in the registry) needs no outside source
        selected = [i for i in selected if i.tag not in remote and here.get(i.tag) is None]

    store = as_store(client)

    def present(ref: str) -> bool:  # a registry base the engine already has needs no registry
        return store.image_id(ref) is not None

    problems = unreachable(selected, present=present)
    if not problems:
        return plan, []
    for lines in problems.values():
        for line in lines:
            say(f"error: {line}")
    blocked = blocked_tags(plan.images, problems)
    rest = [i for i in selected if i.tag not in blocked]
    if not keep_going:
        raise SourcesUnreachable(f"{len(problems)} image(s) need a source that does not answer (named above); "
                                 f"nothing was built. --keep-going builds the {len(rest)} other selected image(s)")
    rows = []  # one row for every blocked image of the plan, selected or not, so the report covers the whole plan
    chosen = {i.tag for i in selected}
    for img in plan.images:
        if img.tag in blocked:
            row = ImageResult.of(img)
            if img.tag in problems:
                row.status, row.error = BuildStatus.FAILED.value, "; ".join(problems[img.tag])
            elif img.tag in chosen:
                row.status, row.error = BuildStatus.NOT_BUILT.value, f"parent {img.parent} not built"
            else:
                row.status = BuildStatus.SKIPPED.value
            rows.append(row)
    return Plan(plan.matrix_file, [i for i in plan.images if i.tag not in blocked]), rows


def concrete_backend(matrix_path: Path, inputs: BuildInputs, settings: BuildSettings, say: Say) -> BuildInputs:
    """A build's backend resolved before anything renders: `--backend auto`, or no flag and a matrix whose rows
    name no backend (or `auto`), become the first backend of the table's AUTO_ORDER that answers here (one line
    says which and why); that concrete name is what the plan renders for and what the record keeps (auto never is).
    Under auto, options that only one backend understands (`--builder`) choose that backend. A concrete
    `--backend`, or a matrix that names its backend, is left as it is (as before: the record keeps the flag only)."""
    if inputs.backend not in (None, AUTO):
        return inputs
    if inputs.backend is None:  # the matrix's rows (parsed, not resolved: nothing renders before this answer)
        named = matrix_backends(matrix_path, lambda: _named_backends(matrix_path))  # cached like the plan
        if named and AUTO not in named:  # every row names its backend
            return inputs
    wanted = [(s.name, o.flag) for s in BACKENDS.values() for o in s.options if settings.backend_options.get(o.setting)]
    if len({n for n, _ in wanted}) == 1:
        name = wanted[0][0]
        line = f"backend auto: {' and '.join(f for _, f in wanted)} given; building with {spec(name).title}"
    else:  # none (or options of two backends: refused by chosen_backend once the plan names one)
        name, line = choose_auto()
    say(line)
    return replace(inputs, backend=name)


def _named_backends(matrix_path: Path) -> set[str]:
    from imagebuild.matrix import load_matrix  # on a cache miss only (plan/cache.py: matrix_backends)

    return {v.values.get("backend", AUTO) for v in load_matrix(matrix_path).variants}


def chosen_backend(plan: Plan, inputs: BuildInputs, settings: BuildSettings) -> tuple[str, dict[str, Any]]:
    """The run's backend and its own run options (the row's `options`), before its preflight and before the engine is
    asked anything; an option only another backend understands is refused (one line): it would not change what this
    one builds."""
    name = plan_backend(plan, inputs)
    for other in BACKENDS.values():
        given = [o.flag for o in other.options if settings.backend_options.get(o.setting)]
        if other.name != name and given:
            raise UsageError(f"{' and '.join(given)}: only the {other.name} backend understands "
                             f"{'it' if len(given) == 1 else 'them'}, and this build renders for and builds with "
                             f"{name}; choose --backend {other.name} or drop {' and '.join(given)}")
    return name, {o.setting: settings.backend_options.get(o.setting) for o in spec(name).options}


def backend_maker(name: str, own: dict[str, Any], store: Any) -> Callable[[], BuildBackend]:
    """How to make the run's backend on `store`: its preflight (one line when it cannot build here), then the
    backend; called by build_step once it knows whether anything may need building."""
    return lambda: preflight(name, own)(store)


def platform_preflight(client: Any, selected: list[ImagePlan], name: str, own: dict[str, Any]) -> None:
    """Every selected image's platform is buildable here (pipeline/platforms.py), or one error line before anything
    builds. A plan of the default platform asks nothing (nor runs the backend's preflight). A backend with
    `features.other_platforms` says, after its preflight, what its builder's nodes list (`platforms`) and whether it
    is the engine's own docker driver (`docker_driver`); `own` holds its run options (the builder's name)."""
    from imagebuild.compat import load as load_tables

    tables = load_tables()
    if all(i.variant.platform == tables.default_platform for i in selected):
        return  # nothing to ask the engine: a plan of the default platform builds as before
    # another platform: only now the engine's machine and pipeline/platforms.py (with host/)
    from imagebuild.engine.connect import engine_machine
    from imagebuild.pipeline.platforms import check_platforms, engine_platform

    cross = spec(name).features.other_platforms
    backend = preflight(name, own)(as_store(client)) if cross else None
    check_platforms(selected, tables, engine_platform(tables, engine_machine(client)), cross, own.get("builder"),
                    tuple(getattr(backend, "platforms", ())), bool(getattr(backend, "docker_driver", True)))


def build_step(client: Any, plan: Plan, selection: Selection, settings: BuildSettings, rec: Record | None,
               progress: Progress, log_dir: Any, say: Say,
               backend: tuple[str, Callable[[], BuildBackend]] | None = None, kept: Derived | None = None) -> BuildRun:
    """Build (or find up to date) the selected images and their parents; rows for the whole plan. `kept`: the
    state's per-image derivations (each image's history, for its size and layer rows, asked once per image ID).

    `backend`: its name and how to make it after its preflight. The engine is asked first which images are here
    (`here`); when every one is, the preflight waits for a first build (DeferredBackend: a no-op asks the builder
    nothing), otherwise it runs now, before any source is asked or anything builds."""
    remote: dict[str, RemoteImage] = {}
    here = None if settings.force else locate_all(client, selection, rec)
    chosen: BuildBackend | None = None
    if backend is not None:
        everything_here = here is not None and all(here.values())
        chosen = DeferredBackend(backend[1]) if everything_here else backend[1]()
    # every selected image here (a no-op): neither the registry nor the engine's version (pulls_zstd) is asked
    if here is not None and settings.registry_cache and not all(here.values()):
        store = as_store(client)
        remote = registry_lookup(selection, here, settings.require_registry, say, pulls_zstd=store.pulls_zstd(),
                                 layers=lambda image_id: layers_of(store.inspect(image_id)))
    buildable, blocked = preflight_sources(client, plan, selection, settings.keep_going, here, remote, say)
    options = BuildOptions(force=settings.force, only=selection.only, keep_going=settings.keep_going,
                           log_dir=log_dir, remote=remote, created=settings.created, kept=kept)
    if settings.jobs:
        options.jobs = settings.jobs
    if backend is not None:
        options.backend = backend[0]
    results = (builder.build_plan(client, buildable, options, progress, backend=chosen)
               if buildable.images else []) + blocked
    order = {img.tag: n for n, img in enumerate(plan.images)}
    results.sort(key=lambda r: order[r.tag])
    return BuildRun(results)


def finish(run: BuildRun, plan: Plan) -> BuildRun:
    """After the record has completed the rows: whether all went well, and what the next steps may use."""
    by_tag = run.by_tag()
    run.ok = all(r.status in FINE for r in run.results)
    run.ready = [i for i in plan.images if by_tag[i.tag].status in HERE
                 and not (by_tag[i.tag].source or "").startswith("registry")]
    return run
