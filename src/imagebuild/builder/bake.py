"""The plan as a `docker buildx bake` file, for teams that build on a remote BuildKit cluster.

Two forms of the same targets: a bake JSON file (`*.json`) and a compose file (`*.yml`/`*.yaml`, bake_compose.py).
Only the compose form carries `network: host`, which every RUN needs on an engine started without a bridge
(`--bridge=none`, as this project's engines are): buildx 0.13.1 drops `network` from a JSON bake file silently.
Each target carries the build args and labels `imagebuild build` passes for the same image (one home each:
buildargs.dated_build_args, uptodate.planned_labels), so a bake followed by a build is up to date: SOURCE_DATE_EPOCH
is the date of the OS image the target's chain starts from, read from the engine as build reads it
(sourcedate.source_date_epoch; a child's is its parent's), CREATED that date unless asked otherwise, REVISION the
checkout's HEAD. Each is a bake variable whose per-target default is that value (set it in the environment to
override). A root image's base-id label is the ID of the OS image the export found (a variable OS_IMAGE_ID_<os> too);
no label names a child's parent (uptodate.py: bake knows it only once built), so the labels are build's.
The same image IDs as `build` also need the same layer bytes: build exports with `rewrite-timestamp=true` (every file
dated SOURCE_DATE_EPOCH at most) and zstd layers (buildkit/argv.EXPORT_OPTIONS), and so does each target's `output`
(OUTPUT_*, chosen as build chooses for the builder the export finds: pipeline/export.bake_outputs): the engine's docker driver on the containerd image store
refuses that option for an image it unpacks, so there each target writes a docker archive `bake-images/<target>.tar`
to `docker load` after the bake (what build does with its own archive); any other driver loads `type=docker` itself;
the docker driver without the containerd store keeps build-time dates (build too). Context files are written with
the mode and date build's context tar gives them (context.py), and a stage's files reach the image by `COPY --link`
(backends.Features.linked_copies: the same layer whatever the parent's dates). Measured: base, runtime and dev are
build's very images (the same image IDs: docs/backends.md).
Credentialed index URLs are build secrets by id, read from the environment at bake time (never in the file).

Shape (https://docs.docker.com/build/bake/reference/):

    {"variable": {"CREATED": {"default": ""}, "REVISION": {"default": ""}, "SOURCE_DATE_EPOCH": {"default": ""},
                  "OS_IMAGE_debian12": {"default": "imagebuild-os/debian12:<hash>"}},
     "group":  {"default": {"targets": [every target]}, "base"|"runtime"|"dev": {...}, "<variant>": {...}},
     "target": {"<id>": {"context": "bake-context/<id>", "dockerfile": "Dockerfile",
                         "contexts": {"imagebuild-parent": "target:<parent id>"},
                         "args": {..., "BASE_IMAGE": "imagebuild-parent",
                                  "CREATED": "${CREATED != \"\" ? CREATED : \"<the target's default>\"}", ...},
                         "tags": [tag, aliases...], "labels": {...}}}}

Chaining: the Dockerfiles start `ARG BASE_IMAGE` / `FROM ${BASE_IMAGE}`. Bake sets `args.BASE_IMAGE` to the name of a
named context, and BuildKit resolves `FROM <name>` against `contexts` after expanding the ARG: a child's
`imagebuild-parent` is `target:<parent id>` (bake builds the parent first and feeds its result, no registry round
trip); a base image's `imagebuild-os` is `docker-image://${OS_IMAGE_<os>}` (a bootstrapped OS image must be pushed
somewhere the cluster can pull it: set OS_IMAGE_<os>=<ref> in the environment) or the matrix's registry base.

Target names are the plan ids with characters outside [a-zA-Z0-9_-] replaced by "_" (bake's rule). Paths are relative
to the bake file's folder: run `docker buildx bake -f docker-bake.json` from there. Secret build args (credentialed
index URLs) are written as a bake variable of the same name whose default is the value with its credentials removed
(`secrets.strip_credentials`: the other indexes, torch's included, stay); set NAME in the environment to the full value.
Literal `${`/`%{` in values are escaped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from imagebuild.builder.backends.buildkit.argv import EXPORT_OPTIONS, secret_id
from imagebuild.builder.buildargs import dated_build_args
from imagebuild.builder.context import MTIME, file_mode
from imagebuild.builder.uptodate import BASE_LABEL, planned_labels
from imagebuild.dates import SOURCE_DATE_LABEL
from imagebuild.engine.store import ImageStore
from imagebuild.errors import UsageError
from imagebuild.files import FileProblem, make_dirs_inside, refuse_overlap, write_inside, write_text_atomic
from imagebuild.models import FLAVORS, ImagePlan, Plan, platform_to_ask
from imagebuild.plan.tags import references
from imagebuild.secrets import strip_credentials

PARENT_CONTEXT = "imagebuild-parent"
OS_CONTEXT = "imagebuild-os"
IMAGES_DIR = "bake-images"  # beside the bake file: the archives of OUTPUT_ARCHIVE
# what each target's `output` is (bake_outputs picks one for the builder, as the BuildKit backend does for `build`)
OUTPUT_ARCHIVE = "archive"  # the docker driver on the containerd store: a docker archive per target, loaded after
OUTPUT_LOAD = "load"  # any other driver: the image into the engine, dates rewritten
OUTPUT_ENGINE = "engine"  # the docker driver without the containerd store: its own exporter (build-time dates)
_BAD = re.compile(r"[^a-zA-Z0-9_-]")


def target_name(text: str) -> str:
    return _BAD.sub("_", text)


def os_variable(os_id: str) -> str:
    return "OS_IMAGE_" + target_name(os_id)


def _esc(value: str) -> str:
    """Keep bake's HCL-in-JSON templating away from literal values."""
    return str(value).replace("${", "$${").replace("%{", "%%{")


def _default_os_ref(image: ImagePlan) -> str:
    try:
        from imagebuild.builder.bootstrap import spec_for

        return spec_for(image.variant).tag
    except Exception:  # bootstrap module absent or the variant incomplete: a readable placeholder
        return f"imagebuild-os/{image.variant.os.id}:latest"


def _var(name: str, default: str | None = None) -> str:
    """A reference to the bake variable `name`; with `default`, this use's own default when the variable is empty
    (one variable, a default per target: the targets of two OSes can have two source dates)."""
    if default is None:
        return "${" + name + "}"
    literal = default.replace("\\", "\\\\").replace('"', '\\"')
    return "${" + f'{name} != "" ? {name} : "{literal}"' + "}"


def bake_document(plan: Plan, contexts: dict[str, str], dockerfiles: dict[str, str] | None = None,
                  os_images: dict[str, str] | None = None, source_dates: Mapping[str, int] | None = None,
                  created: str | None = None, revision: str = "unknown",
                  secrets: bool = False, esc: Callable[[str], str] = _esc,
                  var: Callable[[str, str | None], str] = _var, outputs: str = OUTPUT_LOAD,
                  base_ids: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The bake JSON for `plan`. `contexts`: image id -> context path as it should appear in the file;
    `dockerfiles`: image id -> dockerfile path (relative to the context), default "Dockerfile";
    `os_images`: os id -> default reference for bootstrapped bases; `source_dates`: image id -> its source date
    (`planned_source_dates`; 0 when absent); `created`/`revision`: the run's (buildargs.created_arg/revision_arg);
    `secrets`: the credentialed build args as build secrets read from the same-named environment variables (a plan
    rendered for BuildKit reads them so; a classic one needs `--set '*.args.NAME=...'`).
    `esc`/`var`: how a literal value and a variable reference are written (bake_compose.py writes compose's);
    `outputs`: OUTPUT_ARCHIVE, OUTPUT_LOAD or OUTPUT_ENGINE (module doc); `base_ids`: a root image's id -> the ID of
    the OS/registry image it is built on (`planned_base_ids`; "" when unknown: build then builds it again), the
    default of its OS_IMAGE_ID_<os> variable (set it with OS_IMAGE_<os> to bake on another OS image)."""
    dockerfiles = dockerfiles or {}
    os_images = os_images or {}
    source_dates = source_dates or {}
    base_ids = base_ids or {}
    names: dict[str, str] = {}
    for image in plan.images:
        name = target_name(image.id)
        if name in names.values():
            raise ValueError(f"two plan ids map to the bake target {name!r}")
        names[image.tag] = name
    # empty: each target's use of them carries its own default (the value `build` passes that image)
    variables: dict[str, dict[str, Any]] = {"CREATED": {"default": ""}, "REVISION": {"default": ""},
                                            "SOURCE_DATE_EPOCH": {"default": ""}}
    targets: dict[str, dict[str, Any]] = {}
    groups: dict[str, dict[str, Any]] = {"default": {"targets": []}}
    for image in plan.images:
        name = names[image.tag]
        args = {k: esc(v) for k, v in sorted(image.build_args.items()) if k not in image.secret_build_args}
        # BuildKit: a build secret (below), never a build argument, which the image history would keep; classic: the
        # value without its credentials, which the environment may override at bake time
        for k, v in (() if secrets else sorted(image.secret_build_args.items())):
            variables.setdefault(k, {"default": esc(strip_credentials(v))})
            args[k] = var(k, None)
        if image.parent:
            if image.parent not in names:
                raise ValueError(f"{image.tag}: parent {image.parent} is not in the plan")
            ctx = {PARENT_CONTEXT: f"target:{names[image.parent]}"}
            args["BASE_IMAGE"] = PARENT_CONTEXT
        else:
            base = image.variant.base
            if base.kind == "registry" and base.ref:
                ctx = {OS_CONTEXT: f"docker-image://{esc(base.ref)}"}
            else:
                os_var = os_variable(image.variant.os.id)
                variables.setdefault(os_var, {"default": esc(os_images.get(image.variant.os.id)
                                                              or _default_os_ref(image))})
                ctx = {OS_CONTEXT: "docker-image://" + var(os_var, None)}
            args["BASE_IMAGE"] = OS_CONTEXT
        epoch = source_dates.get(image.id, 0)
        for k, v in dated_build_args(epoch, created, revision).items():  # what build passes, after the plan's
            args[k] = var(k, esc(v))
        labels = {k: esc(v) for k, v in planned_labels(image, base_ids.get(image.id, ""), str(epoch)).items()}
        labels[SOURCE_DATE_LABEL] = var("SOURCE_DATE_EPOCH", str(epoch))
        if image.parent is None:  # a root: the ID of the image it starts from (uptodate.py), overridable with it
            id_var = "OS_IMAGE_ID_" + target_name(image.variant.os.id)
            variables.setdefault(id_var, {"default": ""})
            labels[BASE_LABEL] = var(id_var, esc(base_ids.get(image.id, "")))
        targets[name] = {
            "context": contexts[image.id],
            "dockerfile": dockerfiles.get(image.id, "Dockerfile"),
            "contexts": ctx,
            "args": args,
            "tags": [esc(t) for t in references(image)],
            "labels": labels,
        }
        output = target_output(name, outputs)
        if output:
            targets[name]["output"] = [output]
        if platform_to_ask(image.variant.platform):  # what build asks BuildKit for (an arm64 image on amd64: QEMU)
            targets[name]["platforms"] = [image.variant.platform]
        if image.secret_build_args and secrets:  # buildkit templates read them from /run/secrets/<id>
            targets[name]["secret"] = [f"id={secret_id(k)},env={k}" for k in sorted(image.secret_build_args)]
        groups["default"]["targets"].append(name)
        groups.setdefault(image.flavor, {"targets": []})["targets"].append(name)
        groups.setdefault(target_name(image.variant.key), {"targets": []})["targets"].append(name)
    ordered_groups = {"default": groups.pop("default")}
    for flavor in FLAVORS:
        if flavor in groups:
            ordered_groups[flavor] = groups.pop(flavor)
    ordered_groups.update(groups)
    return {"variable": variables, "group": ordered_groups, "target": targets}


def target_output(name: str, outputs: str) -> str | None:
    """A target's `output` entry (None: the builder's default exporter, OUTPUT_ENGINE)."""
    if outputs == OUTPUT_ARCHIVE:
        return f"type=docker,dest={IMAGES_DIR}/{name}.tar,{EXPORT_OPTIONS}"
    if outputs == OUTPUT_LOAD:
        return f"type=docker,{EXPORT_OPTIONS}"
    return None


def archives(doc: Mapping[str, Any]) -> list[str]:
    """The docker archives a bake of `doc` (bake JSON or compose form) writes, in target order: what to `docker load`
    after it (empty unless OUTPUT_ARCHIVE)."""
    found = []
    for target in (doc.get("target") or {}).values():
        found += list(target.get("output") or [])
    for service in (doc.get("services") or {}).values():
        found += list(((service.get("build") or {}).get("x-bake") or {}).get("output") or [])
    return [part.split("=", 1)[1] for spec in found for part in spec.split(",") if part.startswith("dest=")]


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def planned_source_dates(plan: Plan, store: ImageStore | None, os_images: Mapping[str, str] | None = None,
                         refs: Mapping[str, str | None] | None = None) -> tuple[dict[str, int], list[str]]:
    """image id -> the SOURCE_DATE_EPOCH `build` gives it, and the OS images whose date nothing here could read.

    Build reads it with sourcedate.source_date_epoch from the image it builds on: the caller's SOURCE_DATE_EPOCH,
    else a parent's own date (its label, the date it was built with: so a whole chain has its OS image's date), else
    the OS image's `created`. So the export reads the same function on the OS image each chain starts from (the
    --os-image reference, the bootstrap image build found or made, the registry base) in the engine `store`. Where
    there is no engine or no such image there, a bake has no date `build` would agree with: the newest bootstrap
    snapshot of the plan, else the time of the export, and the OS is named in the second value. `refs`: root_refs's
    answer when the caller has it (else asked here)."""
    from imagebuild.builder.sourcedate import source_date_epoch
    from imagebuild.dates import from_environment

    refs = root_refs(plan, store, os_images) if refs is None else refs
    roots: dict[str, int] = {}
    unread: list[str] = []
    out: dict[str, int] = {}
    for image, root in _with_roots(plan):
        if root.tag not in roots:
            ref = refs.get(root.tag)
            env = from_environment()
            epoch = env if env is not None else (source_date_epoch(store, ref) if store is not None and ref else 0)
            if not epoch:
                unread.append(root.variant.os.id)
                epoch = _fallback_source_date(plan)
            roots[root.tag] = epoch
        out[image.id] = roots[root.tag]
    return out, sorted(set(unread))


def planned_base_ids(plan: Plan, store: ImageStore | None, os_images: Mapping[str, str] | None = None,
                     refs: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """root image id -> the ID of the OS/registry image `build` would build it on, as the engine `store` has it (the
    same reference planned_source_dates reads; `refs` as it takes them); absent where nothing here has it."""
    if store is None:
        return {}
    refs = root_refs(plan, store, os_images) if refs is None else refs
    out: dict[str, str] = {}
    for image, root in _with_roots(plan):
        ref = refs.get(root.tag) if image is root else None
        found = store.image_id(ref) if ref else None
        if found:
            out[image.id] = found
    return out


def root_refs(plan: Plan, store: ImageStore | None, os_images: Mapping[str, str] | None = None,
              ) -> dict[str, str | None]:
    """root tag -> the reference of the image it is built on (_root_ref), each root asked once: what
    planned_source_dates and planned_base_ids read."""
    return {root.tag: _root_ref(root, store, os_images) for image, root in _with_roots(plan) if image is root}


def _with_roots(plan: Plan) -> list[tuple[ImagePlan, ImagePlan]]:
    """(image, the root of its chain: the image whose parent is outside the plan) in plan order."""
    by_tag = plan.by_tag()
    pairs = []
    for image in plan.images:
        root = image
        while root.parent is not None and root.parent in by_tag:
            root = by_tag[root.parent]
        pairs.append((image, root))
    return pairs


def _root_ref(root: ImagePlan, store: ImageStore | None, os_images: Mapping[str, str] | None) -> str | None:
    """The reference of the image a root is built on: the registry base, the --os-image given, or the bootstrap
    image build found or made in `store`."""
    from imagebuild.builder.bootstrap import find_existing, spec_for

    base = root.variant.base
    if base.kind == "registry":
        return base.ref
    ref = (os_images or {}).get(root.variant.os.id)
    if ref is None and store is not None:
        try:
            ref = find_existing(store, spec_for(root.variant))
        except Exception:  # an incomplete variant: no bootstrap image to read
            ref = None
    return ref


def _fallback_source_date(plan: Plan) -> int:
    """The newest bootstrap snapshot of the plan, else the time of the export (no OS image date to read)."""
    snapshots = [img.variant.base.snapshot for img in plan.images if img.variant.base.snapshot]
    if snapshots:
        return int(datetime.strptime(max(snapshots), "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp())
    return int(time.time())


def write_bake(plan: Plan, output: str | Path, context_dir: str | Path | None = None,
               os_images: dict[str, str] | None = None, secrets: bool = False,
               source_dates: Mapping[str, int] | None = None, created: str | None = None,
               revision: str = "unknown", outputs: str = OUTPUT_LOAD,
               base_ids: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Write each image's build context (Dockerfile, rendered context files, hard links to big context folders such as
    the wheelhouse) under `context_dir` (default: <output folder>/bake-context) and the bake file to `output`: a
    compose file when it ends in .yml/.yaml (bake_compose.py), else bake JSON.

    Nothing outside the contexts and the bake file is touched: every folder below the context root is made without
    following a symbolic link (a planted `bake-context/<id>` link is refused), files are replaced by rename (a hard
    link into the wheelhouse is never written through), and an input folder that overlaps a context (a wheelhouse
    inside its own bake context, which refreshing the context would delete) is refused before anything is written.
    `source_dates`, `created`, `revision`, `outputs`, `base_ids`: as bake_document takes them."""
    output = Path(output)
    base_dir = output.parent if str(output.parent) else Path(".")
    # the default context root is made below the bake file's folder, so a link planted as bake-context is refused
    ctx_base, ctx_rel = (Path(context_dir), Path()) if context_dir else (base_dir, Path("bake-context"))
    ctx_root = ctx_base / ctx_rel
    te_dirs = _te_wheel_dirs(plan)
    for image in plan.images:
        for rel, src in {**image.context_dirs, **te_dirs.get(image.tag, {})}.items():
            refuse_overlap(src, f"{image.id}: context folder {rel}", ctx_root, "the bake context")
            refuse_overlap(src, f"{image.id}: context folder {rel}", output, "the bake file")
    contexts: dict[str, str] = {}
    ctx_base.mkdir(parents=True, exist_ok=True)  # the folder the user named (a link there is their choice)
    for image in plan.images:
        folder = make_dirs_inside(ctx_base, ctx_rel / image.id, "bake context")
        write_inside(folder, "Dockerfile", image.dockerfile.encode(), "bake context")
        for rel, data in sorted(image.context_files.items()):
            # the mode and date build's context gives the file (context.py): a file a COPY puts in the image (the
            # entrypoint, the TF32 hook) then makes the same layer bytes, so the same image ID
            written = write_inside(folder, rel, data, "bake context", mode=file_mode(data))
            os.utime(written, (MTIME, MTIME), follow_symlinks=False)  # never through a link planted there
        for rel, src in sorted({**image.context_dirs, **te_dirs.get(image.tag, {})}.items()):
            target = folder / rel
            if Path(rel).parent != Path("."):
                make_dirs_inside(folder, Path(rel).parent, "bake context")
            if target.is_symlink() or (target.exists() and not target.is_dir()):
                raise FileProblem(f"bake context: {target} is not a folder an earlier bake made; remove it")
            if target.exists():
                shutil.rmtree(target)  # an earlier bake's hard links (rmtree never follows a link inside)
            shutil.copytree(src, target, copy_function=_link_or_copy, symlinks=False)
        rel_path = os.path.relpath(folder, base_dir.resolve() if folder.is_absolute() else base_dir)
        contexts[image.id] = Path(rel_path).as_posix()
    output.parent.mkdir(parents=True, exist_ok=True)
    if outputs == OUTPUT_ARCHIVE:  # buildx opens each archive's file and does not make its folder
        make_dirs_inside(base_dir, Path(IMAGES_DIR), "bake images")
    if output.suffix in (".yml", ".yaml"):
        import yaml

        from imagebuild.builder.bake_compose import compose_document, compose_esc, compose_var

        doc = compose_document(bake_document(plan, contexts, os_images=os_images, source_dates=source_dates,
                                             created=created, revision=revision, secrets=secrets,
                                             esc=compose_esc, var=compose_var, outputs=outputs,
                                             base_ids=base_ids))
        _write_output(output, yaml.safe_dump(doc, sort_keys=False, width=120))
        return doc
    doc = bake_document(plan, contexts, os_images=os_images, source_dates=source_dates, created=created,
                        revision=revision, secrets=secrets, outputs=outputs, base_ids=base_ids)
    _write_output(output, json.dumps(doc, indent=2) + "\n")
    return doc


def _write_output(output: Path, text: str) -> None:
    """The bake file, replaced by rename (a link at its name is replaced, never written through)."""
    if output.is_dir() and not output.is_symlink():
        raise FileProblem(f"-o {output}: is a folder; give a file name (e.g. {output / 'docker-bake.yml'})")
    try:
        write_text_atomic(output, text)
    except OSError as exc:
        raise FileProblem(f"-o {output}: cannot write the bake file ({exc.strerror or exc})") from None


def _te_wheel_dirs(plan: Plan) -> dict[str, dict[str, Path]]:
    """tag -> {"te-wheels": cache folder} for runtime images with transformer_engine: bake installs the wheel the
    builder compiled once (builder/te_cache.py); a wheel not built yet is an error naming the command that builds it."""
    from imagebuild.builder.te_cache import TE_WHEEL_DIR, cached, wheel_dir

    out: dict[str, dict[str, Path]] = {}
    missing = []
    for image in plan.images:
        if image.te_wheel is None:
            continue
        found = cached(image.te_wheel.key)
        if found is None:
            missing.append(f"{image.tag} (key {image.te_wheel.key[:12]}, {wheel_dir(image.te_wheel.key)})")
        else:
            out[image.tag] = {TE_WHEEL_DIR: found}
    if missing:
        raise UsageError("the transformer_engine wheel is not in the wheel cache for " + "; ".join(missing)
                         + ": build it once with `imagebuild build --only '<runtime tag>'` on a machine with an "
                         "engine (the wheel is cached outside the image), then export again")
    return out
