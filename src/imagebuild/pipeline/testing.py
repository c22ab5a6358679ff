"""The test step: the smoke suite in each planned image, by content.

Each image is tested as its image ID (never a tag that may have moved). A passing result for the same image ID,
suite version, expectations, options and host is "up to date" and not re-run (--retest forces); every run is stored
in the record under that key, through the run's one RecordBook (no re-read per image). An up-to-date image still
gets its JUnit and JSON files, from the recorded run (cached.py), so CI publishes the same files either way."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import Any

from imagebuild.models import ImagePlan
from imagebuild.pipeline.cached import recorded_tests, write_recorded
from imagebuild.pipeline.loaded import RecordBook, Say
from imagebuild.pipeline.located import Located
from imagebuild.pipeline.settings import TestSettings
from imagebuild.record import passed_result, store_result, test_key
from imagebuild.smoke import runner
from imagebuild.smokeresult import SmokeResult


class TestOutcome(str, Enum):
    __test__ = False  # not a pytest class despite the name

    RAN = "ran"  # the suite ran in the image now
    UP_TO_DATE = "up to date"  # the record's passing run for this very content, suite and host
    MISSING = "missing"  # no local image with the planned inputs: one failed check saying why


@dataclass
class TestedImage:
    __test__ = False

    image: ImagePlan
    image_id: str | None
    outcome: TestOutcome
    tests: dict[str, Any]  # the report row's `tests` (ImageResult.tests): a smokeresult.SmokeResult's to_json()

    @property
    def failed(self) -> bool:
        return bool(self.tests.get("failed"))


def missing_tests(img: ImagePlan, why: str) -> dict[str, Any]:
    return {"passed": 0, "failed": 1, "skipped": 0, "image": img.tag,
            "checks": [{"name": "image/present", "status": "failed", "figures": {}, "reason": f"{img.tag}: {why}"}]}


def test_step(client: Any, images: list[tuple[ImagePlan, Located]], book: RecordBook, settings: TestSettings,
              echo: Say | None) -> list[TestedImage]:
    """One TestedImage per (plan row, where it is), in the given order."""
    suite = runner.suite_version()
    where = runner.host_where(client)
    options = {"require_gpu": settings.require_gpu, "perf": settings.perf}
    out: list[TestedImage] = []
    for img, here in images:
        image_id = here.image_id
        if image_id is None:
            out.append(TestedImage(img, None, TestOutcome.MISSING, missing_tests(img, here.why)))
            continue
        expect = dict(runner.expectations_for(img), **settings.expect)
        key = test_key(image_id, suite, expect, options, where)
        hit = None if settings.retest else passed_result(book.record, key)
        if hit is not None:
            if echo:
                echo(f"up to date: {img.tag} ({image_id[7:19]}) passed this suite on {hit['at']} "
                     "(--retest runs it again)")
            tests = recorded_tests(hit, image_id, img.flavor, where)
            write_recorded(tests, img.tag, settings.junit_dir, settings.result_dir)
            out.append(TestedImage(img, image_id, TestOutcome.UP_TO_DATE, tests))
            continue
        ran = runner.run_smoke(image_id, img.flavor, expect, label=img.tag, require_gpu=settings.require_gpu,
                               perf=settings.perf, client=client, echo=echo, junit_dir=settings.junit_dir,
                               result_dir=settings.result_dir, timeout=settings.timeout)
        result = SmokeResult.from_json(ran, f"the smoke run of {img.tag}").replace(where=where)
        book.update(partial(store_result, key=key, image_id=image_id, suite=suite, expectations=expect,
                            options=options, where=where, result=result))
        out.append(TestedImage(img, image_id, TestOutcome.RAN, result.to_json()))
    return out
