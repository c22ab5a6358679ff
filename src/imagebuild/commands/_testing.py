"""Smoke-test planned images by content: `build --test` and `test --matrix` share this.

Each image is tested as its image ID (never a tag that may have moved). A passing result for the same image ID,
suite version, expectations, options and host is "up to date" and not re-run (`--retest` forces); every result is
stored in the matrix's record under that key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from imagebuild.models import ImagePlan


def test_planned(client, images: list[tuple[ImagePlan, str | None, str]], matrix_path: Path, *,
                 state_dir: str | None, extra_expect: dict[str, str] | None = None, retest: bool = False,
                 require_gpu: bool = False, perf: bool = False, echo: Callable[[str], None] | None = None,
                 **run_kwargs) -> list[tuple[ImagePlan, dict]]:
    """images: (plan row, local image ID or None, why not). Returns (plan row, tests dict) for each."""
    from imagebuild.record import load_record, passed_result, store_result, test_key, updating
    from imagebuild.smoke import runner

    suite = runner.suite_version()
    where = runner.host_where(client)
    options = {"require_gpu": require_gpu, "perf": perf}
    rec = load_record(matrix_path, state_dir)
    out: list[tuple[ImagePlan, dict]] = []
    for img, image_id, why in images:
        if image_id is None:
            tests = {"passed": 0, "failed": 1, "skipped": 0, "image": img.tag,
                     "checks": [{"name": "image/present", "status": "failed", "figures": {},
                                 "reason": f"{img.tag}: {why}"}]}
            out.append((img, tests))
            continue
        expect = dict(runner.expectations_for(img), **(extra_expect or {}))
        key = test_key(image_id, suite, expect, options, where)
        hit = None if retest or rec is None or rec.problem else passed_result(rec, key)
        if hit is not None:
            if echo:
                echo(f"up to date: {img.tag} ({image_id[7:19]}) passed this suite on {hit['at']} "
                     "(--retest runs it again)")
            tests = {**hit, "image": image_id, "flavor": img.flavor, "up_to_date": True,
                     "gpu": where != "cpu", "where": where}
            out.append((img, tests))
            continue
        tests = runner.run_smoke(image_id, img.flavor, expect, label=img.tag, require_gpu=require_gpu, perf=perf,
                                 client=client, echo=echo, **run_kwargs)
        tests["where"] = where
        with updating(matrix_path, directory=state_dir) as rec_w:
            store_result(rec_w, key, image_id, suite, expect, options, where, tests)
        rec = load_record(matrix_path, state_dir)
        out.append((img, tests))
    return out


test_planned.__test__ = False  # type: ignore[attr-defined]  # not a pytest test despite the name
