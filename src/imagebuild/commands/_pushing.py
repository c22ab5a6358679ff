"""Push planned images by image ID: `build --push` and `push --matrix` share this.

"Tested" is read from the record by content (image ID + suite version + the plan's expectations), so
`push --registry OTHER` right after `build --test` pushes without rebuilding or retesting: the image is tagged for
OTHER from its ID, pushed, and the digest is recorded per repository."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from imagebuild.models import ImagePlan, ImageResult, Plan


def gate_rows(images: list[ImagePlan], located: dict[str, str | None], why: dict[str, str], rec) -> dict[str, dict]:
    """tag -> the row push's gate reads: built or not, and the record's test result for this content."""
    from imagebuild.record.testkeys import failed_result, tested_ok
    from imagebuild.smoke import runner

    suite = runner.suite_version()
    rows: dict[str, dict] = {}
    for img in images:
        image_id = located.get(img.tag)
        if image_id is None:
            rows[img.tag] = {"status": "not-built", "error": why.get(img.tag)}
            continue
        expect = runner.expectations_for(img)
        hit = tested_ok(rec, image_id, suite, expect) or failed_result(rec, image_id, suite, expect)
        rows[img.tag] = {"status": "built", "image_id": image_id, "tests": hit}
    return rows


def push_located(client, plan: Plan, images: list[ImagePlan], located: dict[str, str | None], matrix_path: Path,
                 state_dir: str | None, *, require_tests: bool, log: Callable[[str], None],
                 why: dict[str, str] | None = None, auth_for: Callable | None = None, retries: int | None = None,
                 ca_file: str | None = None) -> list[ImageResult]:
    from imagebuild.oci import Reference, resolve_auth
    from imagebuild.push import push_plan
    from imagebuild.record import load_record, updating
    from imagebuild.record.update import record_push
    from imagebuild.secrets import redact

    rec = load_record(matrix_path, state_dir)
    if rec is not None and rec.problem:
        rec = None
    rows = gate_rows(images, located, why or {}, rec)
    for img in images:  # the plan's tag (this registry) points at the image the record holds
        image_id = located.get(img.tag)
        if image_id and rows[img.tag].get("status") == "built":
            ref = Reference.parse(img.tag)
            client.api.tag(image_id, ref.name, ref.tag, force=True)
    if auth_for is None:
        auths: dict = {}

        def auth_for(registry: str):
            if registry not in auths:
                auths[registry] = resolve_auth(registry)
            return auths[registry]

    from imagebuild.push.pusher import DEFAULT_RETRIES

    pushed = push_plan(plan, client=client, auth_for=auth_for, images=images, report_rows=rows,
                       require_tests=require_tests, log=lambda m: log(redact(m)), ca_file=ca_file,
                       retries=DEFAULT_RETRIES if retries is None else retries)
    with updating(matrix_path, directory=state_dir) as rec_w:
        record_push(rec_w, plan, pushed, {t: i for t, i in located.items() if i})
    for res in pushed:
        p = res.push or {}
        res.image_id = located.get(res.tag)
        line = f"{p.get('status', '?'):>9}  {res.tag}  {p.get('digest') or ''}"
        if p.get("status") in ("failed", "skipped"):
            line += f"  ({p.get('error') or p.get('reason')})"
        log(redact(line))
    return pushed
