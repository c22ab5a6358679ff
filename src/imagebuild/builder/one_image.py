"""Build one ImagePlan, or find it up to date, and fill its result row.

The base image is always an image ID (the parent's, or the OS image's), never a moving tag, so a child is built on
exactly the parent this run produced. The build itself goes through the run's backend (backend.py; the classic
builder by default), which streams steps and lines to the progress view, writes the whole output to the image's log
(redacted) and reports an image ID or the failing step. Any error fails this image only; the scheduler decides what
that means for the rest. A rebuild whose content equals the image its tag named before keeps that image
(reproduced.py), so a `--force` that changed nothing does not change the children's parent.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from imagebuild.builder.backend import BuildRequest
from imagebuild.builder.backend_run import run_build
from imagebuild.builder.bases import base_image_id
from imagebuild.builder.buildargs import dated_build_args
from imagebuild.builder.describe import describe
from imagebuild.builder.logs import open_log
from imagebuild.builder.remote import use_remote
from imagebuild.builder.reproduced import same_content
from imagebuild.builder.sourcedate import source_date_epoch
from imagebuild.builder.te_cache import TE_WHEEL_DIR, ensure_te_wheel
from imagebuild.builder.uptodate import find_up_to_date, planned_labels
from imagebuild.errors import ImagebuildError
from imagebuild.models import ImagePlan, ImageResult
from imagebuild.oci import Reference
from imagebuild.phases import Phase
from imagebuild.report.budget import check_size_budget
from imagebuild.secrets import redact, register_secret, register_url_credentials

if TYPE_CHECKING:
    from imagebuild.builder.state import RunState


def build_one(run: RunState, img: ImagePlan) -> ImageResult:
    res = run.result(img)
    start = time.monotonic()
    try:
        if run.cancel.is_set():
            res.status, res.error = "failed", "interrupted"
            return res
        if use_remote(run, img, res):
            return res
        os_image: list[Phase] = []
        if img.parent is not None:
            base_id = run.results[img.parent].image_id
            assert base_id, f"parent {img.parent} has no image ID"
        else:
            t0 = time.monotonic()
            base_id = base_image_id(run, img)  # bootstrapped or pulled once per run (bases.py), else found
            os_image.append(Phase("base", "the OS image (bootstrapped, pulled or found)", time.monotonic() - t0))
        with run.lock:
            hlock = run.hash_locks.setdefault(img.inputs_hash, threading.Lock())
        with hlock:  # two plan entries with identical inputs build once
            existing = None if run.options.force else find_up_to_date(run.store, img, base_id)
            if existing:
                res.status, res.image_id = "up-to-date", existing
                describe(run, res)
                res.build_seconds = time.monotonic() - start
                res.phases = [*os_image, Phase("up-to-date", "found up to date in the engine (nothing built)",
                                               time.monotonic() - start - sum(p.seconds or 0.0 for p in os_image),
                                               cached=True)]
                check_budget(img, res)
                if res.status != "failed":
                    run.progress.set(img.tag, "up-to-date")
            else:
                _build(run, img, res, base_id, start)
                res.phases[:0] = os_image
            if res.status == "built":
                check_budget(img, res)
                if res.status != "failed":
                    run.progress.set(img.tag, "built")
    except ImagebuildError as exc:
        res.status, res.error = "failed", redact(str(exc))
    except Exception as exc:  # engine/API errors: one image fails, the run goes on
        res.status, res.error = "failed", redact(f"{type(exc).__name__}: {exc}")
    if res.status == "failed":
        res.build_seconds = res.build_seconds or (time.monotonic() - start)
        if run.cancel.is_set():
            res.error = "interrupted"
            run.progress.set(img.tag, "interrupted")
        else:
            run.progress.set(img.tag, "failed", res.error.splitlines()[0] if res.error else "")
            run.progress.failure(res, run.tails.get(img.tag, ""))
    return res


def _build(run: RunState, img: ImagePlan, res: ImageResult, base_id: str, start: float) -> None:
    log_path = run.log_dir / f"{img.id}.log"
    res.log_path = str(log_path)
    extra_dirs: dict[str, Path] = {}
    phases: list[Phase] = []
    if img.te_wheel is not None:  # the TE wheel from the cache (built first when missing)
        t0 = time.monotonic()
        extra_dirs[TE_WHEEL_DIR] = ensure_te_wheel(run, img, base_id, res)
        cached = (res.te_wheel or {}).get("status") == "cached"
        phases.append(Phase("te-wheel", "transformer_engine wheel" + (" (from the cache)" if cached else " (built)"),
                            time.monotonic() - t0, cached=cached))
    run.progress.set(img.tag, "building", "sending context")
    previous = run.store.image_id(img.tag)
    with open_log(log_path) as log:
        log.write(f"# {img.tag}\n# inputs hash {img.inputs_hash}\n# BASE_IMAGE={base_id}\n")
        outcome = run_build(run, build_request(run, img, base_id, log, extra_dirs), img.tag)
    res.build_seconds = time.monotonic() - start
    res.phases = phases + list(outcome.phases)
    if outcome.failed:
        res.status = "failed"
        res.error = outcome.error
        run.tails[img.tag] = outcome.tail
        return
    image_id = outcome.image_id
    assert image_id
    if previous and previous != image_id:
        t0 = time.monotonic()
        image_id = keep_reproduced(run, img, res, image_id, previous)
        res.phases.append(Phase("compare", "with the image the tag named before (reproduced.py)"
                                + (": same content, kept it" if image_id == previous else ""),
                                time.monotonic() - t0))
    # the status last: the scheduler starts the children once it reads "built", and they take image_id as parent
    res.image_id = image_id
    res.backend = run.options.backend
    res.status = "built"
    describe(run, res)


def keep_reproduced(run: RunState, img: ImagePlan, res: ImageResult, new: str, previous: str) -> str:
    """The image ID to keep: `previous` when the new image has the same content as the one its tag named before
    (reproduced.py), so the children's parent ID, and with it their inputs, stays the same; else `new`. Best effort:
    on any error the new image stays."""
    try:
        if not same_content(run.store, previous, new):
            return new
        ref = Reference.parse(img.tag)
        run.store.tag(previous, ref.name, ref.tag or "latest")
    except Exception as exc:
        run.warn(f"{img.tag}: could not compare with the previous image {previous[7:19]}: {exc}")
        return new
    res.reproduced_from = new
    try:
        run.store.remove(new)
    except Exception as exc:  # another tag or a container holds it: harmless, it is just not removed
        run.warn(f"{img.tag}: kept the previous image; could not remove the new one {new[7:19]}: {exc}")
    run.progress.note(f"{img.tag}: reproduced: same content as {previous[7:19]} (kept it)", style="")
    return previous


def build_request(run: RunState, img: ImagePlan, base_id: str, log: IO[str],
                  extra_dirs: dict[str, Path] | None = None) -> BuildRequest:
    """The plan row as a backend request: the run's build args, the parent's image ID, the up-to-date labels."""
    for v in img.secret_build_args.values():
        register_secret(v)
        register_url_credentials(v)
    epoch = source_date_epoch(run.store, base_id)
    build_args = {**run.proxies, **img.build_args, **dated_build_args(epoch, run.created, run.revision)}
    labels = planned_labels(img, base_id, str(epoch))
    return BuildRequest(tag=img.tag, dockerfile=img.dockerfile, build_args=build_args, labels=labels,
                        timeout=run.options.build_timeout, parents={"BASE_IMAGE": base_id},
                        secret_build_args=dict(img.secret_build_args), context_files=dict(img.context_files),
                        context_dirs={**img.context_dirs, **(extra_dirs or {})}, log=log,
                        platform=img.variant.platform)


def check_budget(img: ImagePlan, res: ImageResult) -> None:
    """Matrix `size_budget` per flavor: an image over budget fails (naming its largest layers)."""
    budget = (img.variant.size_budget or {}).get(img.flavor)
    if not budget:
        return
    message = check_size_budget(res, budget)
    if message:
        res.status, res.error = "failed", message
