"""The OS image under a parentless image: bootstrapped (mmdebstrap) or pulled, once per distinct source.

Several variants usually share one OS; the first worker to need a source does the work and the others wait on a
future keyed by that source, so a bootstrap or pull never runs twice in one run, and its failure fails every image
on it.
"""

from __future__ import annotations

import concurrent.futures as cf
from typing import TYPE_CHECKING

from imagebuild.builder import bootstrap as bootstrap_mod
from imagebuild.builder.pull import ensure_pulled
from imagebuild.errors import UsageError
from imagebuild.models import ImagePlan
from imagebuild.secrets import redact

if TYPE_CHECKING:
    from imagebuild.builder.state import RunState


def base_key(img: ImagePlan) -> str:
    b = img.variant.base
    if b.kind == "registry":
        return f"registry:{b.ref}"
    return f"bootstrap:{bootstrap_mod.spec_for(img.variant).hash()}"


def base_image_id(run: RunState, img: ImagePlan) -> str:
    """The OS image for a parentless image: bootstrapped or pulled once per distinct source."""
    key = base_key(img)
    with run.lock:
        existing_fut = run.base_futures.get(key)
        owner = existing_fut is None
        fut: cf.Future[str] = existing_fut if existing_fut is not None else cf.Future()
        if owner:
            run.base_futures[key] = fut
    if not owner:
        run.progress.set(img.tag, "waiting", "for its OS base image")
        return fut.result()
    try:
        b = img.variant.base
        if b.kind == "registry":
            if not b.ref:
                raise UsageError(f"{img.tag}: base source 'registry' without a reference")
            run.progress.set(img.tag, "pulling", b.ref)
            image_id = ensure_pulled(run.store, b.ref, warn=run.warn)
        elif b.kind == "bootstrap":
            spec = bootstrap_mod.spec_for(img.variant)
            existing = None if run.options.force_bootstrap else bootstrap_mod.find_existing(run.store, spec)
            if existing:
                image_id = existing
            else:
                run.progress.set(img.tag, "bootstrapping",
                                 f"{spec.os_id} ({spec.codename}) from {redact(spec.mirror)}")
                # through the module attribute, so tests can replace ensure_bootstrap
                res = bootstrap_mod.ensure_bootstrap(
                    run.store, spec, force=run.options.force_bootstrap, log_dir=run.log_dir,
                    workdir=run.options.bootstrap_workdir,
                    on_line=lambda ln: run.progress.line(img.tag, ln),
                )
                image_id = res.image_id
                run.progress.note(f"bootstrapped {res.tag} with {res.tool} in {res.seconds:.0f}s", style="")
        else:
            raise UsageError(f"{img.tag}: unknown base source kind {b.kind!r}")
    except BaseException as exc:
        # waiters get the same exception: every image on this source fails with the bootstrap/pull error
        fut.set_exception(exc)
        raise
    fut.set_result(image_id)
    return image_id
