"""Build-failure diagnosis (builder/diagnose.py) is the same whichever backend built: the classic builder's stream and
BuildKit's rawjson progress feed the failing step's output to the one Diagnosis and say the same thing.

The BuildKit streams are the recorded failed run (buildx 0.13.1, dockerd 26.1.5; _fake_docker_cli.failing_rawjson)
with the failing step's output replaced by what pip/apt print, split across log messages as BuildKit sends it; the
other stage keeps printing beside it."""

from __future__ import annotations

import pytest
from _fake_docker_cli import failing_rawjson

from imagebuild.builder.backends.buildkit.progress import RawJsonProgress
from imagebuild.builder.backends.classic.stream import BuildStream
from imagebuild.builder.diagnose import Diagnosis

EXPECTED, GOT = "0" * 64, "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"
PIP_HASH = [
    "Collecting six==1.17.0 (from -r /tmp/imagebuild-lock.txt (line 2))",
    "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the package "
    "versions, please update the hashes. Otherwise, examine the package contents carefully; someone may have "
    "tampered with them.",
    "    six==1.17.0 from https://files.pythonhosted.org/packages/b7/ce/six-1.17.0-py2.py3-none-any.whl (from -r "
    "/tmp/imagebuild-lock.txt (line 2)):",
    f"        Expected sha256 {EXPECTED}",
    f"             Got        {GOT}",
]
APT_GONE = ["Reading package lists...", "E: Version '4:12.2.0-2' for 'gcc' was not found"]
FINDINGS = {
    "pip": ("pip refused 1 file(s) whose sha256 is not the lock's: six-1.17.0-py2.py3-none-any.whl (six==1.17.0): "
            f"the lock expects sha256 {EXPECTED}, the file has sha256 {GOT}"),
    "apt": "apt has no gcc=4:12.2.0-2: the lock's version is gone from the mirror",
}


def _buildkit_summary(failing_output: list[str], beside: list[str] = ()) -> str:
    progress = RawJsonProgress()
    stream = failing_rawjson(failing_output, list(beside))
    for i in range(0, len(stream), 97):
        progress.feed(stream[i:i + 97])
    progress.finish(1)
    return progress.failure_summary()


def _classic_summary(failing_output: list[str]) -> str:
    stream = BuildStream()
    stream.feed({"stream": "Step 7/12 : RUN set -eux; pip install --require-hashes -r /tmp/imagebuild-lock.txt\n"})
    for line in failing_output:
        stream.feed({"stream": line + "\n"})
    stream.feed({"error": "The command '/bin/sh -c ...' returned a non-zero code: 1"})
    return stream.failure_summary()


@pytest.mark.parametrize(("kind", "output"), [("pip", PIP_HASH), ("apt", APT_GONE)])
def test_both_backends_give_the_same_diagnosis(kind, output):
    classic, buildkit = _classic_summary(output), _buildkit_summary(output)
    assert classic.startswith(FINDINGS[kind]) and buildkit.startswith(FINDINGS[kind])
    # the same finding; only where differs: the classic builder's step number, BuildKit's stage and step
    assert classic.split(" (Step 7/12, ")[0] == buildkit.split(" ([pip 1/2], ")[0]
    assert buildkit.endswith("([pip 1/2], pip install --require-hashes)" if kind == "pip"
                             else "([pip 1/2], apt-get install)")


def test_a_parallel_stage_s_output_is_not_the_failing_step_s_diagnosis():
    """The apt line printed by the stage beside is not why `[pip 1/2]` failed: BuildKit's own reason stays."""
    summary = _buildkit_summary(["collecting six", "ERROR: no matching distribution"], beside=APT_GONE)
    assert summary.startswith("[pip 1/2] RUN echo collecting six") and "exit code: 3" in summary
    assert "apt has no" not in summary


def test_nothing_recognised_is_no_finding():
    diagnosis = Diagnosis()
    for line in ["ERROR: THESE PACKAGES DO NOT MATCH THE HASHES", "done", f"        Expected sha256 {EXPECTED}"]:
        diagnosis.feed(line)  # a hash line after the block ended belongs to no refused file
    assert diagnosis.summary("Step 1/2") is None
