"""Run the selected images through a thread pool in dependency order.

An image is submitted once its parent is built or up to date; a failed or not-built parent marks it not-built.
Without --keep-going the first failure stops new submissions (running builds finish) and the rest are not-built;
with it, images that do not depend on the failure go on. Images outside --only are reported as skipped.
"""

from __future__ import annotations

import concurrent.futures as cf
from typing import TYPE_CHECKING

from imagebuild.builder.disk import preflight_disk_check
from imagebuild.builder.one_image import build_one
from imagebuild.builder.order import order_images
from imagebuild.models import ImagePlan, ImageResult

if TYPE_CHECKING:
    from imagebuild.builder.state import RunState

DONE = ("built", "up-to-date")
FAILED = ("failed", "not-built")


def execute(run: RunState) -> list[ImageResult]:
    names = [(i.tag, i.short_tag) for i in run.images]
    run.progress.start(names)
    for img in run.images:
        run.result(img)
    preflight_disk_check(run)
    pending = list(run.images)
    running: dict[cf.Future[ImageResult], ImagePlan] = run.running
    stop_reason: str | None = None
    finished: set[str] = set()  # tags whose build_one returned
    run.pool = cf.ThreadPoolExecutor(max_workers=max(1, run.options.jobs), thread_name_prefix="build")
    try:
        while pending or running:
            for img in list(pending):
                parent_res = run.results.get(img.parent) if img.parent else None
                if parent_res is not None and parent_res.status in FAILED:
                    res = run.result(img)
                    res.status = "not-built"
                    res.error = f"not built: its parent {img.parent} {parent_res.status.replace('-', ' ')}"
                    run.progress.set(img.tag, "not-built", f"parent {parent_res.status}")
                    pending.remove(img)
                    continue
                # a parent counts once its build_one has returned: a row may read "up-to-date" while the parent is
                # still being pulled or checked against its size budget
                if parent_res is not None and (parent_res.status not in DONE or img.parent not in finished):
                    continue
                if stop_reason or run.cancel.is_set():
                    continue
                pending.remove(img)
                running[run.pool.submit(build_one, run, img)] = img
            if stop_reason and not running:
                for img in pending:
                    res = run.result(img)
                    res.status, res.error = "not-built", stop_reason
                    run.progress.set(img.tag, "not-built", "an earlier image failed")
                pending.clear()
                break
            if not running:
                break
            done, _ = cf.wait(list(running), timeout=0.25, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                img = running.pop(fut)
                res = fut.result()
                finished.add(img.tag)
                if res.status == "failed" and not run.options.keep_going and not stop_reason:
                    stop_reason = (f"not started: {img.tag} failed (--keep-going builds the images that "
                                   "do not depend on it)")
    finally:
        run.pool.shutdown(wait=False, cancel_futures=True)
    out = []
    for img in order_images(run.plan.images):
        if img.tag in run.results:
            out.append(run.results[img.tag])
        else:
            row = ImageResult.of(img)
            row.status = "skipped"
            out.append(row)
    return out
