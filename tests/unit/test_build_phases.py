"""Where an image's build time went (issue 44): the phases each backend reads from its own stream, typed
(imagebuild/phases.py), in the report (build-report.json `phases`, the Markdown's phase table) and read back.

Fixtures (tests/fixtures/phases/): the CPU runtime rebuilt after one pip package was added to the matrix, as
`docker buildx build --progress rawjson` writes it (buildx 0.13.1: the resolve stage and the changed tier run, the
torch tier is cached, the export re-timestamps the layers and writes the archive) and as the classic builder streams
it (each chunk with the second it arrived: `{"at": s, "chunk": {...}}`, the engine's chunks as they are).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.builder.backends.buildkit.progress import RawJsonProgress
from imagebuild.builder.backends.classic.stream import BuildStream
from imagebuild.models import ImageResult
from imagebuild.phases import Phase, PhaseError, phases_from_json
from imagebuild.report import load_report, render_markdown, rerender, write_reports
from imagebuild.report.stored import ReportError

ROOT = Path(__file__).resolve().parents[2]
PHASES = ROOT / "tests" / "fixtures" / "phases"
BUILDX = Path(__file__).parent / "fixtures" / "buildx"
TAG = "127.0.0.1:5000/pytorch:2.13.0-cpu-py3.11-debian12-runtime"
VERS = {"torch": "2.13.0", "cuda": "cpu", "python": "3.11", "os": "debian12"}


def _buildkit(path: Path) -> list[Phase]:
    progress = RawJsonProgress()
    text = path.read_text()
    for i in range(0, len(text), 211):  # as a pipe delivers it: objects split across reads
        progress.feed(text[i:i + 211])
    progress.finish(0)
    assert not progress.failed
    return progress.timed_phases()


def _classic(path: Path) -> tuple[BuildStream, list[Phase]]:
    now = [0.0]
    stream = BuildStream(clock=lambda: now[0])
    stream.begin()
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        now[0] = entry["at"]
        stream.feed(entry["chunk"])
    stream.finish()
    return stream, stream.timed_phases()


def test_buildkit_stream_into_phases():
    phases = _buildkit(PHASES / "buildkit-runtime-one-package.rawjson")
    kinds = [p.kind for p in phases]
    assert kinds[0] == "prepare" and kinds[-2:] == ["export", "retimestamp"]
    assert phases[0].seconds == pytest.approx(0.40, abs=0.01)  # definition, metadata, context: their span
    resolve = [p for p in phases if p.kind == "resolve"]
    assert [p.name.split("]")[0] for p in resolve] == ["[resolve 1/4", "[resolve 2/4", "[resolve 3/4"]
    assert [p.cached for p in resolve] == [True, False, False]
    assert resolve[2].seconds == pytest.approx(9.289, abs=0.001)
    torch = [p for p in phases if p.name.startswith("[tier-torch")]
    assert len(torch) == 4 and all(p.cached for p in torch)  # the unchanged tier: every step from the cache
    numpy = next(p for p in phases if p.name.startswith("[tier-matrix-numpy 4/4] RUN"))
    assert numpy.cached is False and numpy.seconds == pytest.approx(14.472, abs=0.001)
    steps = [p for p in phases if p.kind == "step"]
    assert len(steps) == 8 + 7 and all(p.seconds is not None for p in steps)
    # the rewrite's span is taken out of the export's: 144.8 s of exporting, 96.5 of them re-timestamping
    export, retimestamp = phases[-2:]
    assert retimestamp.seconds == pytest.approx(96.528, abs=0.001)
    assert export.seconds == pytest.approx(144.829 - 96.528, abs=0.001)
    assert export.cached is None and retimestamp.cached is None


def test_the_recorded_one_step_build_into_phases():
    phases = _buildkit(BUILDX / "built.rawjson")
    assert [(p.kind, p.name, p.cached) for p in phases] == [
        ("prepare", "build definition, metadata, context", None), ("step", "[1/2] RUN echo built ok", False),
        ("export", "exporting the image (layers, manifest, config, unpack/archive)", None)]
    assert phases[1].seconds == pytest.approx(0.150, abs=0.001)


def test_a_failed_buildkit_build_keeps_the_phases_it_got_to():
    progress = RawJsonProgress()
    progress.feed((BUILDX / "failed-run.rawjson").read_text())
    progress.finish(1)
    phases = progress.timed_phases()
    assert progress.failed and any(p.name.startswith("[pip 1/2] RUN echo collecting six") for p in phases)
    assert not any(p.kind == "export" for p in phases)


def test_classic_stream_into_phases():
    stream, phases = _classic(PHASES / "classic-runtime-one-package.jsonl")
    assert not stream.failed and stream.image_id
    assert phases[0] == Phase("prepare", "sending the build context", 0.84)
    steps = [p for p in phases if p.kind in ("resolve", "step")]
    assert len(steps) == 18 and [p.name.split(" : ")[0] for p in steps][:2] == ["Step 1/18", "Step 2/18"]
    # the resolve stage from its `FROM ... AS resolve` to the next FROM
    assert [p.name.split(" : ")[0] for p in phases if p.kind == "resolve"] == [
        "Step 2/18", "Step 3/18", "Step 4/18", "Step 5/18"]
    by_step = {p.name.split(" : ")[0]: p for p in steps}
    assert by_step["Step 5/18"].seconds == pytest.approx(11.7, abs=0.01) and by_step["Step 5/18"].cached is False
    assert by_step["Step 9/18"].cached is True  # the torch tier's pip install: "---> Using cache"
    assert by_step["Step 13/18"].seconds == pytest.approx(19.6, abs=0.01)
    assert by_step["Step 2/18"].cached is None and by_step["Step 1/18"].cached is None  # FROM, ARG: no cache
    assert phases[-1].kind == "export" and phases[-1].seconds == pytest.approx(0.03, abs=0.001)


def test_a_failed_classic_build_has_its_steps_but_no_export():
    now = [0.0]
    stream = BuildStream(clock=lambda: now[0])
    stream.begin()
    for at, chunk in [(0.5, {"stream": "Step 1/2 : FROM ${BASE_IMAGE} AS resolve\n"}), (0.6, {"stream": " ---> 6f1c0b2e9a7d\n"}),
                      (0.7, {"stream": "Step 2/2 : RUN false\n"}), (3.0, {"error": "returned a non-zero code: 1"})]:
        now[0] = at
        stream.feed(chunk)
    stream.finish()
    phases = stream.timed_phases()
    assert stream.failed and [(p.kind, p.seconds) for p in phases] == [
        ("prepare", 0.5), ("resolve", pytest.approx(0.1)), ("resolve", pytest.approx(2.3))]


def _row(**kw) -> ImageResult:
    return ImageResult(tag=TAG, flavor="runtime", inputs_hash="h", versions=VERS, status="built",
                       image_id="sha256:" + "a" * 64, size=900_000_000, build_seconds=172.4, **kw)


def test_report_with_phases(tmp_path):
    phases = [Phase("te-wheel", "transformer_engine wheel (from the cache)", 0.01, True)] + \
        _buildkit(PHASES / "buildkit-runtime-one-package.rawjson") + [Phase("sbom", "SBOM", 12.34567)]
    write_reports([_row(phases=phases)], tmp_path)
    doc = json.loads((tmp_path / "build-report.json").read_text())
    stored = doc["images"][0]["phases"]
    assert stored[0] == {"kind": "te-wheel", "name": "transformer_engine wheel (from the cache)", "seconds": 0.01,
                         "cached": True}
    assert stored[-1]["seconds"] == 12.346  # to the millisecond
    assert phases_from_json(stored, "x") == [Phase(p.kind, p.name, round(p.seconds, 3), p.cached) for p in phases]
    md = (tmp_path / "build-report.md").read_text()
    assert "<summary>Phases: where each image's time went" in md
    assert "`2.13.0-cpu-py3.11-debian12-runtime` (built, build 2m52s):" in md
    assert "| phase | seconds | cached |" in md
    assert "| retimestamp: rewriting layers with SOURCE_DATE_EPOCH | 96.5 | – |" in md
    assert re.search(r"\| \[tier-matrix-numpy 4/4\] RUN set -eux; /opt/venv.* \| 14\.5 \| no \|", md)
    assert "| resolve: [resolve 3/4] RUN set -eux; PYTHONHASHSEED=0" in md
    # the cached steps are one row, the quick ones another; the JSON keeps every one
    assert "| 9 cached step(s) under 1 s | 0.0 | yes |" in md
    assert "| 4 more step(s) under 0.5 s each | 0.3 | no |" in md
    assert load_report(tmp_path)["images"][0]["phases"] == stored


def test_report_without_phases_an_older_one(tmp_path):
    write_reports([_row()], tmp_path)
    doc = json.loads((tmp_path / "build-report.json").read_text())
    assert doc["images"][0]["phases"] == []
    assert "Phases:" not in (tmp_path / "build-report.md").read_text()
    del doc["images"][0]["phases"]  # written before phases were measured
    (tmp_path / "build-report.json").write_text(json.dumps(doc))
    assert "phases" not in load_report(tmp_path)["images"][0]
    rerender(tmp_path)
    assert "Phases:" not in (tmp_path / "build-report.md").read_text()
    assert "Phases:" not in render_markdown({**doc, "images": [{**doc["images"][0], "phases": None}]})


@pytest.mark.parametrize(("phases", "why"), [
    ('"fast"', "images[0].phases: expected a list, got a string"),
    ('[{"kind": "step", "name": "x", "seconds": "3"}]', "images[0].phases[0].seconds: expected a number or null"),
    ('[{"name": "x", "seconds": 3}]', "images[0].phases[0]: lacks 'kind'"),
    ('[{"kind": "step", "name": "x", "seconds": 1, "cached": "yes"}]', "images[0].phases[0].cached: expected true/false"),
    ('[{"kind": "step", "name": "x", "seconds": -1}]', "images[0].phases[0].seconds: expected a number >= 0"),
    ('[7]', "images[0].phases[0]: expected an object, got a number"),
])
def test_a_damaged_phases_entry_is_one_error_line(tmp_path, phases, why):
    (tmp_path / "build-report.json").write_text('{"schema": 2, "images": [{"tag": "a:b", "phases": ' + phases + "}]}")
    with pytest.raises(ReportError, match=re.escape(why)) as err:
        load_report(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'build-report.json'}") and "\n" not in str(err.value)


def test_a_damaged_phases_entry_given_to_the_report_command(tmp_path):
    (tmp_path / "build-report.json").write_text(
        '{"schema": 2, "images": [{"tag": "a:b", "phases": [{"kind": "step", "name": "x", "seconds": true}]}]}')
    proc = subprocess.run([sys.executable, "-c", "from imagebuild.cli import main; main()", "report",
                           "--report-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"error: {tmp_path / 'build-report.json'}") and len(proc.stderr.splitlines()) == 1
    assert "images[0].phases[0].seconds" in proc.stderr


def test_a_damaged_phase_handed_to_the_renderer_is_one_error_line():
    with pytest.raises(PhaseError, match=r"^build-report.json: the row of a:b: phases\[0\].name: expected a string"):
        render_markdown({"images": [{"tag": "a:b", "phases": [{"kind": "step", "name": None}]}]})


# -- through the classic backend and the executor (the one fake engine) ---------------------------------------------
OS_REF = "example/os:1@sha256:" + "0" * 64
OS_ID = "sha256:" + "05" * 32


def _recorded_chunks() -> list[dict]:
    return [json.loads(line)["chunk"] for line in (PHASES / "classic-runtime-one-package.jsonl").read_text().splitlines()]


def test_the_classic_backend_hands_its_phases_on():
    from _fake_engine import FakeEngine

    from imagebuild.builder.backend import BuildRequest
    from imagebuild.builder.backends.classic.build import ClassicBackend

    chunks = _recorded_chunks()
    image_id = next(c["aux"]["ID"] for c in chunks if "aux" in c)
    store = FakeEngine()
    store.add_image(None, {}, image_id=image_id)
    store.build_streams.append(chunks)
    build = ClassicBackend(store).start(BuildRequest(tag="ib/x:1", dockerfile="FROM scratch\n", build_args={},
                                                     labels={}, timeout=60))
    list(build.events())
    outcome = build.outcome()
    assert outcome.image_id == image_id
    kinds = [p.kind for p in outcome.phases]
    assert kinds[0] == "prepare" and kinds[-1] == "export" and kinds.count("resolve") == 4
    assert [p.cached for p in outcome.phases if p.kind == "step"].count(True) == 5
    assert all(p.seconds is not None and p.seconds >= 0 for p in outcome.phases)


def _plan():
    from imagebuild.models import BaseSource, ImagePlan, OSInfo, Plan, ResolvedVariant, Versions

    osinfo = OSInfo(id="debian12", family="debian", version="12", codename="bookworm", system_python="3.11",
                    installable_pythons=("3.11",), mirror="http://deb.debian.org/debian", glibc="2.36")
    var = ResolvedVariant(key="k", name="ib", registry="", versions=Versions(torch="2.13.0", cuda="cpu",
                                                                             python="3.11", os="debian12"),
                          cuda_tag="cpu", os=osinfo, base=BaseSource(kind="registry", ref=OS_REF),
                          torch_index_url=None, flavors=("base",), tf32=True, gpu_archs=(), arch_list=(),
                          min_driver=None)
    base = ImagePlan(id="k-base", tag="ib:k-base", flavor="base", parent=None, variant=var,
                     dockerfile="ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN echo base\n", build_args={},
                     context_files={}, labels={"io.imagebuild.flavor": "base"}, inputs_hash="sha256:base",
                     secret_build_args={})
    return Plan("t", [base])


def test_the_executor_puts_the_os_image_and_the_backend_s_phases_on_the_row_then_up_to_date(tmp_path):
    from _fake_engine import FakeEngine

    from imagebuild.builder.executor import build_plan
    from imagebuild.builder.options import BuildOptions
    from imagebuild.builder.progress import Progress

    store = FakeEngine()
    store.add_image(OS_REF, {}, size=10, image_id=OS_ID)
    options = BuildOptions(log_dir=tmp_path, check_disk=False, jobs=1)
    [res] = build_plan(store, _plan(), options, Progress())
    assert res.status == "built", res.error
    assert [p.kind for p in res.phases] == ["base", "prepare", "step", "step", "step", "export"]
    assert [p.name for p in res.phases if p.kind == "step"] == [
        "Step 1/3 : ARG BASE_IMAGE", "Step 2/3 : FROM ${BASE_IMAGE}", "Step 3/3 : RUN echo base"]
    assert res.phases[-2].cached is False and res.phases[2].cached is None  # a RUN step; ARG: no cache
    [again] = build_plan(store, _plan(), options, Progress())  # nothing changed: found, nothing built
    assert again.status == "up-to-date"
    assert [(p.kind, p.cached) for p in again.phases] == [("base", None), ("up-to-date", True)]
