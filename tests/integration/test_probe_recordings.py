"""The recorded probe results (tests/fixtures/probe-results/, scripts/record_probe_results.py) cannot go stale
unnoticed: the real smoke suite runs on each real images/cpu.yaml image (conftest.cpu_build) and what it finds is
compared with the recording of that flavor, check by check: the suite's verdict (name, status, reason) and each
place's raw probe checks, reasons compared with numbers and paths masked (timings, temp folders). A difference
fails naming every drifted check and the command that records them again. tests/unit/test_smoke_recorded.py tests
the suite's logic on these recordings in every `make test`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from imagebuild.smoke import probe as P
from imagebuild.smoke import runner

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("docker_cli")]
ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("record_probe_results", ROOT / "scripts" / "record_probe_results.py")
assert _spec is not None and _spec.loader is not None
rec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rec)


def _drift(recording: dict, fresh: dict) -> list[str]:
    """What a fresh recording of the same image finds otherwise: the verdict's checks, each place's probe checks."""
    out = list(rec.drift(recording["verdict"]["checks"], fresh["verdict"]["checks"]))
    for place in sorted(recording["places"].keys() | fresh["places"].keys()):
        old, new = recording["places"].get(place), fresh["places"].get(place)
        if old is None or new is None:
            out.append(f"probe of {place}: {'not recorded' if old is None else 'did not run now'}")
            continue
        if old["probe"]["sections"] != new["probe"]["sections"]:
            out.append(f"probe of {place}: sections recorded {old['probe']['sections']}, now {new['probe']['sections']}")
        out += [f"probe of {place}: {line}" for line in rec.drift(old["checks"], new["checks"])]
    if recording["recording"]["probe_version"] != P.PROBE_VERSION:
        out.append(f"probe version: recorded {recording['recording']['probe_version']}, now {P.PROBE_VERSION}")
    return out


@pytest.mark.full_tier
def test_recordings_match_a_fresh_run_of_the_real_images(cpu_build, tmp_path):
    assert cpu_build.result.returncode == 0, cpu_build.result.stdout[-3000:] + cpu_build.result.stderr[-3000:]
    problems: list[str] = []
    for img in cpu_build.plan.images:
        path = rec.OUT / f"cpu-{img.flavor}.json"
        if not path.exists():
            problems.append(f"{path.name}: no recording of the {img.flavor} image")
            continue
        recording = json.loads(path.read_text())
        out = tmp_path / img.flavor
        tests = runner.run_smoke(img.tag, expectations=recording["expectations"] or None, client=cpu_build.client,
                                 result_dir=out, name_prefix="ibdev-recorded")
        result = json.loads(Path(tests["result_json"]).read_text())
        info = cpu_build.client.api.inspect_image(img.tag)
        fresh = rec.recording_from_result(result, info, img.tag, recording["expectations"])
        problems += [f"{path.name}: {line}" for line in _drift(recording, fresh)]
    assert not problems, ("the recorded probe results differ from a fresh run of the real images:\n  "
                          + "\n  ".join(problems) + f"\nre-record them: {rec.RECORD_COMMAND} (then review the diff "
                          "of tests/fixtures/probe-results/)")
