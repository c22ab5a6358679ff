"""Smoke tests inside built images: probe/ (in-image probe package, shipped as one zipapp), suite/ (testinfra),
runner (container lifecycle).

Public API (imported lazily so `imagebuild.smoke.probe` stays importable without docker):
    run_smoke(image_ref, flavor=None, expectations=None, *, require_gpu, perf, junit_dir, result_dir, ...) -> dict
    expectations_for(image_plan) -> {"torch": "2.9.1", ...}
    summary_table([(ref, tests)]) -> str
    probe_zipapp() -> Path            # the probe as one file (python probe.pyz --sections ...), built once per process
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_smoke", "expectations_for", "summary_table", "probe_zipapp", "SUITE_DIR",
           "PROBE_PATH"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from imagebuild.smoke import runner

        return getattr(runner, name)
    raise AttributeError(name)
