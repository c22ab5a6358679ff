"""Preflight of outside sources: which image needs what, one line per image with the alternatives, children
blocked with their parent, and `build` stopping (or, with --keep-going, building the rest) before anything builds."""

from __future__ import annotations

import pytest
from _fake_engine import FakeEngine

from imagebuild.builder import sources
from imagebuild.inputs import BuildInputs
from imagebuild.matrix import find_matrix
from imagebuild.plan import make_plan

UNREACHABLE = ("download.pytorch.org", "developer.download.nvidia.com", "ppa.launchpadcontent.net",
               "registry-1.docker.io")


def offline(url: str) -> str | None:
    """This machine: PyPI and the Debian/Ubuntu archives answer; NVIDIA, the PyTorch index, PPAs, Docker Hub not."""
    return "gaierror: Name or service not known" if any(h in url for h in UNREACHABLE) else None


@pytest.fixture(scope="module")
def h100():
    return make_plan(find_matrix("h100.yaml"), BuildInputs(), None)


def test_each_image_names_only_its_own_sources(h100):
    need = {img.short_tag: [s.what for s in sources.needed_sources(img)] for img in h100.images}
    assert need["2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-base"] == ["the ubuntu mirror"]
    assert need["2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-runtime"] == []  # PyPI's default variant
    assert need["2.9.1-cuda13.0-cudnn9-py3.12-ubuntu24.04-runtime"] == ["the PyTorch index"]
    assert need["2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-dev"][0].startswith("NVIDIA's CUDA apt repository")
    assert need["2.9.1-cuda13.0-cudnn9-py3.12-ubuntu24.04-dev"] == []  # nvcc from PyPI


def test_unreachable_lines_and_blocked_children(h100):
    asked: list[str] = []

    def prober(url):
        asked.append(url)
        return offline(url)

    problems = sources.unreachable(h100.images, prober)
    assert len(asked) == len(set(asked))  # each distinct source asked once
    short = {tag.rsplit(":", 1)[1]: lines for tag, lines in problems.items()}
    assert set(short) == {"2.7.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-runtime",
                          "2.7.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-dev",
                          "2.9.1-cuda13.0-cudnn9-py3.12-ubuntu24.04-runtime",
                          "2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-dev"}
    line = short["2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-dev"][0]
    assert "developer.download.nvidia.com" in line and "does not answer" in line and "CUDA 13 variant" in line
    assert "--wheelhouse" in short["2.9.1-cuda13.0-cudnn9-py3.12-ubuntu24.04-runtime"][0]
    blocked = {t.rsplit(":", 1)[1] for t in sources.blocked_tags(h100.images, problems)}
    assert blocked == set(short) | {"2.9.1-cuda13.0-cudnn9-py3.12-ubuntu24.04-dev"}


def test_registry_base_names_bootstrap_as_the_offline_alternative(h100):
    import dataclasses

    img = h100.images[0]
    v = dataclasses.replace(img.variant, base=dataclasses.replace(img.variant.base, kind="registry",
                                                                   ref="ubuntu:24.04"))
    (src,) = sources.needed_sources(dataclasses.replace(img, variant=v))
    assert src.url == "https://registry-1.docker.io/v2/" and "base_image: bootstrap" in src.alternatives
    # the engine already has it (a local or earlier pulled base): no registry needed
    assert sources.needed_sources(dataclasses.replace(img, variant=v), present=lambda ref: True) == []


def test_probe_counts_any_http_answer_as_reachable():
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        assert sources.probe(f"http://127.0.0.1:{srv.server_port}/dists/x/InRelease") is None
    finally:
        srv.shutdown()
    with __import__("socket").socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert "refused" in (sources.probe(f"http://127.0.0.1:{port}/", timeout=2) or "").lower()


def test_build_stops_before_anything_builds(monkeypatch, tmp_path):
    import dataclasses

    from click.testing import CliRunner

    from imagebuild.cli import cli
    from imagebuild.models import ImageResult

    monkeypatch.setattr(sources, "probe", offline)
    built: list = []
    monkeypatch.setattr("imagebuild.engine.connect", lambda *a, **k: FakeEngine())
    def fake_build(client, plan, *a, **k):
        built.append(plan)
        return [dataclasses.replace(ImageResult.of(i), status="built") for i in plan.images]

    monkeypatch.setattr("imagebuild.builder.build_plan", fake_build)
    r = CliRunner().invoke(cli, ["build", "--matrix", "h100.yaml", "--report-dir", str(tmp_path), "--no-registry-cache"],
                           standalone_mode=False)
    assert r.exception is not None and r.exception.exit_code == 1 and not built, r.output
    assert "nothing was built" in str(r.exception) and "--keep-going builds the 4 other" in str(r.exception)
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 4 and all("does not answer" in e for e in errors)
    r = CliRunner().invoke(cli, ["build", "--matrix", "h100.yaml", "--report-dir", str(tmp_path), "--keep-going",
                                 "--no-registry-cache"],
                           standalone_mode=False)
    assert r.exception is None, r.output
    assert len(built) == 1 and {i.short_tag for i in built[0].images} == {
        "2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-base", "2.7.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-base",
        "2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-runtime", "2.9.1-cuda13.0-cudnn9-py3.12-ubuntu24.04-base"}


def test_keep_going_with_only_reports_every_image_once(monkeypatch, tmp_path):
    """--only a blocked image: its unselected child is reported skipped, nothing is missing or doubled."""
    import dataclasses

    from click.testing import CliRunner

    from imagebuild.cli import cli
    from imagebuild.models import ImageResult

    monkeypatch.setattr(sources, "probe", offline)
    monkeypatch.setattr("imagebuild.engine.connect", lambda *a, **k: FakeEngine())
    monkeypatch.setattr("imagebuild.builder.build_plan", lambda client, plan, *a, **k: [
        dataclasses.replace(ImageResult.of(i), status="built" if i.flavor == "base" else "skipped")
        for i in plan.images])
    r = CliRunner().invoke(cli, ["build", "--matrix", "h100.yaml", "--report-dir", str(tmp_path), "--keep-going",
                                 "--only", "*2.9.1-cuda13.0*runtime", "--no-registry-cache"], standalone_mode=False)
    assert r.exception is None, r.output
    import json

    rows = {row["tag"].rsplit(":", 1)[1]: row["status"]
            for row in json.loads((tmp_path / "build-report.json").read_text())["images"]}
    assert len(rows) == 9
    assert rows["2.9.1-cuda13.0-cudnn9-py3.12-ubuntu24.04-runtime"] == "failed"
    assert rows["2.9.1-cuda13.0-cudnn9-py3.12-ubuntu24.04-dev"] == "skipped"


@pytest.mark.parametrize(("wheels", "needs_index"), [
    (["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"], False),  # exactly the planned torch wheel
    (["torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"], True),   # another version
    (["torch-2.13.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl"], True),   # another Python
    (["numpy-2.0.0-cp311-cp311-manylinux_2_28_x86_64.whl", "not-a-wheel.whl"], True),
    ([], True),
])
def test_a_wheelhouse_holding_the_planned_torch_wheel_needs_no_torch_index(tmp_path, wheels, needs_index):
    """`--wheelhouse DIR` holding the planned torch wheel was refused with "needs the PyTorch index ... instead: ...
    or --wheelhouse DIR holding the wheels" — the option the user had given."""
    for name in wheels:
        (tmp_path / name).write_bytes(b"PK")
    plan = make_plan(find_matrix("cpu.yaml"), BuildInputs(wheelhouse=tmp_path), None)
    runtime = next(img for img in plan.images if img.flavor == "runtime")
    assert runtime.variant.torch_index_url == "https://download.pytorch.org/whl/cpu"
    need = [s.what for s in sources.needed_sources(runtime)]
    assert need == (["the PyTorch index"] if needs_index else [])
    blocked = sources.unreachable(plan.images, offline)
    assert (runtime.tag in blocked) is needs_index
