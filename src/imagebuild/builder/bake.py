"""The plan as a `docker buildx bake` file, for teams that build on a remote BuildKit cluster.

Two forms of the same targets: a bake JSON file (`*.json`) and a compose file (`*.yml`/`*.yaml`, bake_compose.py).
Only the compose form carries `network: host`, which every RUN needs on an engine started without a bridge
(`--bridge=none`, as this project's engines are): buildx 0.13.1 drops `network` from a JSON bake file silently.
Each target carries its own up-to-date labels (inputs hash; base ID empty, as bake alone knows the parent it built;
the source date), so a child never shows its parent's; SOURCE_DATE_EPOCH is a variable with the export's default.
Credentialed index URLs are build secrets by id, read from the environment at bake time (never in the file).

Shape (https://docs.docker.com/build/bake/reference/):

    {"variable": {"CREATED": {"default": ""}, "REVISION": {"default": ""},
                  "OS_IMAGE_debian12": {"default": "imagebuild-os/debian12:<hash>"}},
     "group":  {"default": {"targets": [every target]}, "base"|"runtime"|"dev": {...}, "<variant>": {...}},
     "target": {"<id>": {"context": "bake-context/<id>", "dockerfile": "Dockerfile",
                         "contexts": {"imagebuild-parent": "target:<parent id>"},
                         "args": {..., "BASE_IMAGE": "imagebuild-parent", "CREATED": "${CREATED}", ...},
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
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from imagebuild.builder.backends.buildkit.argv import secret_id
from imagebuild.builder.uptodate import BASE_LABEL, INPUTS_LABEL
from imagebuild.dates import SOURCE_DATE_LABEL
from imagebuild.errors import UsageError
from imagebuild.files import FileProblem, make_dirs_inside, refuse_overlap, write_inside, write_text_atomic
from imagebuild.models import FLAVORS, ImagePlan, Plan
from imagebuild.plan.tags import references
from imagebuild.secrets import strip_credentials

PARENT_CONTEXT = "imagebuild-parent"
OS_CONTEXT = "imagebuild-os"
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


def _var(name: str) -> str:
    return "${" + name + "}"


def bake_document(plan: Plan, contexts: dict[str, str], dockerfiles: dict[str, str] | None = None,
                  os_images: dict[str, str] | None = None, source_date: int = 0,
                  secrets: bool = False, esc: Callable[[str], str] = _esc,
                  var: Callable[[str], str] = _var) -> dict[str, Any]:
    """The bake JSON for `plan`. `contexts`: image id -> context path as it should appear in the file;
    `dockerfiles`: image id -> dockerfile path (relative to the context), default "Dockerfile";
    `os_images`: os id -> default reference for bootstrapped bases; `source_date`: SOURCE_DATE_EPOCH's default;
    `secrets`: the credentialed build args as build secrets read from the same-named environment variables (a plan
    rendered for BuildKit reads them so; a classic one needs `--set '*.args.NAME=...'`).
    `esc`/`var`: how a literal value and a variable reference are written (bake_compose.py writes compose's)."""
    dockerfiles = dockerfiles or {}
    os_images = os_images or {}
    names: dict[str, str] = {}
    for image in plan.images:
        name = target_name(image.id)
        if name in names.values():
            raise ValueError(f"two plan ids map to the bake target {name!r}")
        names[image.tag] = name
    variables: dict[str, dict[str, Any]] = {"CREATED": {"default": ""}, "REVISION": {"default": ""},
                                  "SOURCE_DATE_EPOCH": {"default": str(source_date)}}
    targets: dict[str, dict[str, Any]] = {}
    groups: dict[str, dict[str, Any]] = {"default": {"targets": []}}
    for image in plan.images:
        name = names[image.tag]
        args = {k: esc(v) for k, v in sorted(image.build_args.items()) if k not in image.secret_build_args}
        # BuildKit: a build secret (below), never a build argument, which the image history would keep; classic: the
        # value without its credentials, which the environment may override at bake time
        for k, v in (() if secrets else sorted(image.secret_build_args.items())):
            variables.setdefault(k, {"default": esc(strip_credentials(v))})
            args[k] = var(k)
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
                ctx = {OS_CONTEXT: "docker-image://" + var(os_var)}
            args["BASE_IMAGE"] = OS_CONTEXT
        args.setdefault("CREATED", var("CREATED"))
        args.setdefault("REVISION", var("REVISION"))
        args["SOURCE_DATE_EPOCH"] = var("SOURCE_DATE_EPOCH")
        own = {INPUTS_LABEL: image.inputs_hash, BASE_LABEL: "", SOURCE_DATE_LABEL: var("SOURCE_DATE_EPOCH")}
        targets[name] = {
            "context": contexts[image.id],
            "dockerfile": dockerfiles.get(image.id, "Dockerfile"),
            "contexts": ctx,
            "args": args,
            "tags": [esc(t) for t in references(image)],
            "labels": {**{k: esc(v) for k, v in sorted(image.labels.items())}, **own},
        }
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


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def default_source_date(plan: Plan) -> int:
    """SOURCE_DATE_EPOCH's default in the file: the exporter's SOURCE_DATE_EPOCH, else the newest bootstrap snapshot
    of the plan, else the time of the export (a bake has no engine to read the OS image's date from)."""
    from imagebuild.dates import from_environment

    env = from_environment()
    if env is not None:
        return env
    snapshots = [img.variant.base.snapshot for img in plan.images if img.variant.base.snapshot]
    if snapshots:
        return int(datetime.strptime(max(snapshots), "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp())
    return int(time.time())


def write_bake(plan: Plan, output: str | Path, context_dir: str | Path | None = None,
               os_images: dict[str, str] | None = None, secrets: bool = False) -> dict[str, Any]:
    """Write each image's build context (Dockerfile, rendered context files, hard links to big context folders such as
    the wheelhouse) under `context_dir` (default: <output folder>/bake-context) and the bake file to `output`: a
    compose file when it ends in .yml/.yaml (bake_compose.py), else bake JSON.

    Nothing outside the contexts and the bake file is touched: every folder below the context root is made without
    following a symbolic link (a planted `bake-context/<id>` link is refused), files are replaced by rename (a hard
    link into the wheelhouse is never written through), and an input folder that overlaps a context (a wheelhouse
    inside its own bake context, which refreshing the context would delete) is refused before anything is written."""
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
            write_inside(folder, rel, data, "bake context")
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
    source_date = default_source_date(plan)
    output.parent.mkdir(parents=True, exist_ok=True)
    if output.suffix in (".yml", ".yaml"):
        import yaml

        from imagebuild.builder.bake_compose import compose_document, compose_esc, compose_var

        doc = compose_document(bake_document(plan, contexts, os_images=os_images, source_date=source_date,
                                             secrets=secrets, esc=compose_esc, var=compose_var))
        _write_output(output, yaml.safe_dump(doc, sort_keys=False, width=120))
        return doc
    doc = bake_document(plan, contexts, os_images=os_images, source_date=source_date, secrets=secrets)
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
