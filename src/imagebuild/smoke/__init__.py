"""Smoke tests inside built images: probe.py (in-image script), suite/ (testinfra), runner (container lifecycle).

Public API (imported lazily so `imagebuild.smoke.probe` stays importable without docker):
    run_smoke(image_ref, flavor=None, expectations=None, *, require_gpu, perf, junit_dir, result_dir, ...) -> dict
    test_images(images, results=None, *, only=None, **run_smoke_kwargs) -> [(ImagePlan, tests)]
    expectations_for(image_plan) -> {"torch": "2.9.1", ...}
    summary_table([(ref, tests)]) -> str
"""

from __future__ import annotations

__all__ = ["run_smoke", "test_images", "expectations_for", "summary_table", "SUITE_DIR", "PROBE_PATH"]


def __getattr__(name):
    if name in __all__:
        from imagebuild.smoke import runner

        return getattr(runner, name)
    raise AttributeError(name)
