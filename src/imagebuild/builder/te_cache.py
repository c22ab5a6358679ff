"""The transformer_engine wheel cache: compile the torch extension once per build key, reuse it everywhere.

`ensure_te_wheel` returns the cache folder holding the wheel for an image's key (render/te_wheel.py): reused when
present (reported "cached"), else built through the run's backend from the rendered te-wheel Dockerfile on the
variant's base image, copied out of the resulting scratch image into the cache, and that image untagged (its stages
stay as build cache: the runtime image's identical pip stage is served from it, so torch is downloaded once).
`--force` rebuilds a key once per run. The folder is the only thing the runtime build gets: no compiler, header or sdist reaches it.

Cache root: $IMAGEBUILD_CACHE_DIR, else $XDG_CACHE_HOME/imagebuild, else ~/.cache/imagebuild; wheels live in
`te-wheels/<key>/` beside `meta.json` (what was built, when, in how long).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.builder.backend import BuildRequest
from imagebuild.builder.backend_run import run_build
from imagebuild.builder.logs import open_log
from imagebuild.builder.sourcedate import source_date_epoch
from imagebuild.errors import ImagebuildError
from imagebuild.models import ImagePlan, ImageResult, TEWheelPlan
from imagebuild.render.te_key import KEY_LABEL
from imagebuild.secrets import register_secret, register_url_credentials

if TYPE_CHECKING:
    from imagebuild.builder.state import RunState

CACHE_ENV = "IMAGEBUILD_CACHE_DIR"
WHEEL_REPOSITORY = "imagebuild-te-wheel"
TE_WHEEL_DIR = "te-wheels"  # the runtime template's `COPY te-wheels/`
_locks: dict[str, threading.Lock] = {}  # key -> lock, across runs in one process
_locks_lock = threading.Lock()


class TEWheelError(ImagebuildError):
    pass


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "imagebuild"


def wheel_dir(key: str) -> Path:
    return cache_root() / "te-wheels" / key


def cached(key: str) -> Path | None:
    """The key's cache folder when it holds a complete entry (meta.json is written last)."""
    d = wheel_dir(key)
    if (d / "meta.json").is_file() and any(d.glob("transformer_engine_torch-*.whl")):
        return d
    return None


def ensure_te_wheel(run: RunState, img: ImagePlan, base_id: str, res: ImageResult) -> Path:
    """The cache folder with `img`'s TE wheel (built now when missing or forced); fills `res.te_wheel`."""
    plan = img.te_wheel
    assert plan is not None
    with _locks_lock:
        lock = _locks.setdefault(plan.key, threading.Lock())
    with lock:  # two images with one key: the second finds the first's wheel
        found = cached(plan.key)
        if found is not None and not (run.options.force and plan.key not in run.te_rebuilt):
            meta = json.loads((found / "meta.json").read_text())
            res.te_wheel = {"key": plan.key, "status": "cached", "seconds": 0.0, "wheel": meta.get("wheel"),
                            "built_seconds": meta.get("seconds")}
            run.progress.note(f"{img.tag}: TE wheel: cached ({meta.get('wheel')})", style="")
            return found
        t0 = time.monotonic()
        run.progress.set(img.tag, "building", f"TE wheel {plan.key[:12]}: compiling the torch extension")
        wheel, seconds = _build_wheel(run, img, plan, base_id, t0)
        run.te_rebuilt.add(plan.key)
        res.te_wheel = {"key": plan.key, "status": "built", "seconds": seconds, "wheel": wheel}
        run.progress.note(f"{img.tag}: TE wheel: built in {seconds:.0f} s ({wheel})", style="")
        return wheel_dir(plan.key)


def _build_wheel(run: RunState, img: ImagePlan, plan: TEWheelPlan, base_id: str,
                 started: float) -> tuple[str, float]:
    """Build the wheel and put it in the cache; (wheel file name, seconds since `started`)."""
    tag = f"{WHEEL_REPOSITORY}:{plan.key[:12]}"
    log_path = run.log_dir / f"{img.id}-te-wheel.log"
    for v in plan.secret_build_args.values():
        register_secret(v)
        register_url_credentials(v)
    # SOURCE_DATE_EPOCH as the runtime build passes it: its pip stage is the same, so the engine's cache serves it
    build_args = {**run.proxies, **plan.build_args,
                  "SOURCE_DATE_EPOCH": str(source_date_epoch(run.store, base_id))}
    with open_log(log_path) as log:
        log.write(f"# TE wheel for {img.tag}\n# key {plan.key}\n# BASE_IMAGE={base_id}\n")
        request = BuildRequest(tag=tag, dockerfile=plan.dockerfile, build_args=build_args,
                               labels={KEY_LABEL: plan.key}, timeout=run.options.build_timeout,
                               parents={"BASE_IMAGE": base_id}, secret_build_args=dict(plan.secret_build_args),
                               context_dirs=dict(plan.context_dirs), log=log, platform=img.variant.platform)
        outcome = run_build(run, request, img.tag, key=f"{img.tag} (TE wheel)", step_prefix="TE wheel: ")
    if outcome.failed or not outcome.image_id:
        run.tails[img.tag] = outcome.tail
        raise TEWheelError(f"TE wheel {plan.key[:12]} (log {log_path}): {outcome.error}")
    try:
        return _extract(run, outcome.image_id, plan.key, started)
    finally:
        try:  # untagged: its stages stay as build cache (the runtime's pip stage is served from it), like every
            run.store.remove(tag, noprune=True)  # builder stage; `docker image prune` removes them
        except Exception as exc:
            run.warn(f"could not untag the TE wheel build image {tag}: {exc}")


def _extract(run: RunState, image_id: str, key: str, started: float) -> tuple[str, float]:
    """Copy /te-wheels/*.whl out of the built scratch image into the cache (atomically: a temp folder renamed, its
    meta.json written once, with the build's seconds); (wheel file name, seconds since `started`)."""
    import tarfile  # here, not at import: a run that builds no TE wheel (every no-op) does not load it

    data = run.store.copy_out(image_id, "/te-wheels")
    target = wheel_dir(key)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=target.parent))
    wheels = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            name = os.path.basename(member.name)
            if member.isfile() and name.endswith(".whl"):
                src = tar.extractfile(member)
                assert src is not None
                (tmp / name).write_bytes(src.read())
                wheels.append(name)
    if not any(w.startswith("transformer_engine_torch-") for w in wheels):
        shutil.rmtree(tmp, ignore_errors=True)
        raise TEWheelError(f"TE wheel {key[:12]}: the build produced no transformer_engine_torch wheel ({wheels})")
    wheel = sorted(w for w in wheels if w.startswith("transformer_engine_torch-"))[0]
    seconds = round(time.monotonic() - started, 1)
    meta = {"key": key, "wheel": wheel, "built": time.time(), "seconds": seconds}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        target.unlink()  # a link planted at the key's name goes, never what it points at
    elif target.exists():
        shutil.rmtree(target)  # an earlier entry of this key (rmtree never follows a link inside it)
    tmp.rename(target)
    return wheel, seconds
