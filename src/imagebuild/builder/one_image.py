"""Build one ImagePlan, or find it up to date, and fill its result row.

The base image is always an image ID (the parent's, or the OS image's), never a moving tag, so a child is built on
exactly the parent this run produced. The build goes through the low-level API (`client.api.build`), which streams
the engine's JSON chunks: BuildStream turns them into steps, lines and the failing step, and every chunk lands in
the image's log (redacted). Any error fails this image only; the scheduler decides what that means for the rest.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import TYPE_CHECKING

from imagebuild.builder.bases import base_image_id
from imagebuild.builder.buildargs import register_secret_url
from imagebuild.builder.context import build_context
from imagebuild.builder.describe import describe
from imagebuild.builder.interrupt import shutdown_response
from imagebuild.builder.stream import BuildStream, open_log
from imagebuild.builder.uptodate import BASE_LABEL, INPUTS_LABEL, find_up_to_date
from imagebuild.errors import ImagebuildError
from imagebuild.models import ImagePlan, ImageResult
from imagebuild.secrets import redact, register_secret

if TYPE_CHECKING:
    from imagebuild.builder.state import RunState


def build_one(run: RunState, img: ImagePlan) -> ImageResult:
    res = run.result(img)
    start = time.monotonic()
    try:
        if run.cancel.is_set():
            res.status, res.error = "failed", "interrupted"
            return res
        if img.parent is not None:
            base_id = run.results[img.parent].image_id
            assert base_id, f"parent {img.parent} has no image ID"
        else:
            base_id = base_image_id(run, img)
        with run.lock:
            hlock = run.hash_locks.setdefault(img.inputs_hash, threading.Lock())
        with hlock:  # two plan entries with identical inputs build once
            existing = None if run.options.force else find_up_to_date(run.client, img, base_id)
            if existing:
                res.status, res.image_id = "up-to-date", existing
                describe(run, res)
                res.build_seconds = time.monotonic() - start
                check_budget(img, res)
                if res.status != "failed":
                    run.progress.set(img.tag, "up-to-date")
            else:
                _build(run, img, res, base_id, start)
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
    import docker

    for v in img.secret_build_args.values():
        register_secret(v)
        register_secret_url(v)
    buildargs = {
        **run.proxies,
        **img.build_args,
        "BASE_IMAGE": base_id,
        "CREATED": run.created,
        "REVISION": run.revision,
        **img.secret_build_args,
    }
    labels = {**img.labels, INPUTS_LABEL: img.inputs_hash, BASE_LABEL: base_id}
    log_path = run.log_dir / f"{img.id}.log"
    res.log_path = str(log_path)
    run.progress.set(img.tag, "building", "sending context")
    context = build_context(img)
    try:
        with open_log(log_path) as log:
            log.write(f"# {img.tag}\n# inputs hash {img.inputs_hash}\n# BASE_IMAGE={base_id}\n")
            stream = BuildStream(log=log)
            try:
                gen = run.client.api.build(
                    fileobj=context, custom_context=True, decode=True, rm=True, forcerm=True, pull=False,
                    network_mode="host", buildargs=buildargs, labels=labels, tag=img.tag,
                    timeout=run.options.build_timeout,
                )
                # the SDK does not hand out the streaming response; the generator's frame holds it, and the
                # interrupt path needs it to shut the connection
                frame = getattr(gen, "gi_frame", None)
                with run.lock:
                    if frame is not None and "response" in frame.f_locals:
                        run.responses[img.tag] = frame.f_locals["response"]
                if run.cancel.is_set():  # interrupted while the request was being sent
                    shutdown_response(run.responses.get(img.tag))
                for chunk in gen:
                    for ev in stream.feed(chunk):
                        if ev.kind == "step":
                            run.progress.step(img.tag, ev.step or 0, ev.steps or 0, ev.text)
                        elif ev.kind == "container":
                            with run.lock:
                                run.containers.add(ev.text)
                        elif ev.kind == "line":
                            run.progress.line(img.tag, ev.text)
            except docker.errors.APIError as exc:
                stream.fail(exc.explanation or str(exc))
            except Exception as exc:  # connection shut by an interrupt, engine gone
                if run.cancel.is_set():
                    stream.fail("interrupted")
                else:
                    stream.fail(f"lost the build stream: {type(exc).__name__}: {exc}")
            finally:
                with run.lock:
                    run.responses.pop(img.tag, None)
            stream.finish()
    finally:
        context.close()
    res.build_seconds = time.monotonic() - start
    if stream.failed:
        res.status = "failed"
        res.error = stream.failure_summary()
        run.tails[img.tag] = stream.tail_text()
        _set_optional(res, "log_tail", list(stream.tail))
        return
    image_id = stream.image_id or ""
    if not image_id.startswith("sha256:"):  # the stream may report a short ID ("Successfully built 0123abcd")
        image_id = run.client.api.inspect_image(image_id)["Id"]
    res.status, res.image_id = "built", image_id
    describe(run, res)


def check_budget(img: ImagePlan, res: ImageResult) -> None:
    """Matrix `size_budget` per flavor: an image over budget fails (naming its largest layers)."""
    budget = (img.variant.size_budget or {}).get(img.flavor)
    if not budget:
        return
    try:
        from imagebuild.report.budget import check_size_budget
    except ImportError:  # the report stage is optional
        return
    message = check_size_budget(res, budget)
    if message:
        res.status, res.error = "failed", message


def _set_optional(res: ImageResult, name: str, value) -> None:
    """Set a field only if this version of ImageResult has it (models.py fields are added by later stages)."""
    if name in {f.name for f in dataclasses.fields(res)}:
        setattr(res, name, value)
