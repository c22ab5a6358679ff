"""The whole-process no-op `imagebuild build` (every image up to date) does only what such a run needs: its modules
load no later step (test, push, sign, SBOM reading, the host facts) and none of what the plan cache saves (the matrix
checks, packaging, resolve, render, jinja2); `auto`'s question about the matrix's rows is answered from the cache; the
engine is not asked again what the run already knows (an alias already on the image, the engine's version, the
checkout's revision when nothing is built). Guards of issue 26 item 5: module loads and engine calls, no timings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _fake_engine import FakeEngine
from _support import chain, plan_of

from imagebuild.builder.executor import build_plan
from imagebuild.builder.options import BuildOptions
from imagebuild.builder.progress import Progress
from imagebuild.builder.state import RunState
from imagebuild.inputs import BuildInputs
from imagebuild.pipeline import building
from imagebuild.pipeline.selection import select_images
from imagebuild.pipeline.settings import BuildSettings
from imagebuild.pipeline.supply import previous_ids
from imagebuild.plan import cache

SRC = Path(__file__).resolve().parents[2] / "src"
BASE_REF = "example/os:1@sha256:" + "0" * 64

# what a build without --test/--push whose images are all up to date never needs (a prefix names a package)
NOT_ON_THE_NO_OP_PATH = (
    "imagebuild.smoke.runner", "imagebuild.smoke.sides", "imagebuild.push", "imagebuild.sign", "imagebuild.inventory",
    "imagebuild.host", "imagebuild.pipeline.pushing", "imagebuild.pipeline.testing", "imagebuild.pipeline.signing",
    "imagebuild.pipeline.layers", "imagebuild.pipeline.platforms", "imagebuild.lock", "imagebuild.plan.assemble",
    "imagebuild.resolve", "imagebuild.render.image", "imagebuild.matrix.doc", "imagebuild.matrix.schema",
    "imagebuild.builder.ociarchive", "imagebuild.builder.backends.buildkit.build", "jinja2", "packaging.requirements",
    "rich.live", "docker", "requests",
)


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(SRC)})


def test_the_no_op_builds_modules_load_no_later_step():
    """What `imagebuild build` imports before it asks the engine anything (cli, the command, the pipeline's build
    run, the --only selection, the cached plan's reader) loads none of NOT_ON_THE_NO_OP_PATH (a fresh interpreter)."""
    code = ("import sys\n"
            "import imagebuild.cli, imagebuild.commands.build, imagebuild.engine.cli, imagebuild.pipeline.flow\n"
            "import imagebuild.plan.cache, imagebuild.pipeline.selection, imagebuild.builder.backends.buildkit\n"
            "from imagebuild.matrix import find_matrix\n"
            "find_matrix('cpu.yaml')\n"
            f"bad = sorted(m for m in sys.modules if m.startswith({NOT_ON_THE_NO_OP_PATH!r}))\n"
            "sys.exit('loaded: ' + ', '.join(bad) if bad else 0)\n")
    out = _fresh(code)
    assert out.returncode == 0, out.stderr


def test_autos_question_about_the_matrix_rows_comes_from_the_cache(tmp_path, monkeypatch):
    """The backends the rows name: the matrix is read (and checked) once; then, in a fresh process, not loaded at
    all while nothing it depends on changed; an edit reads it again."""
    monkeypatch.setenv("IMAGEBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("IMAGEBUILD_NO_PLAN_CACHE", raising=False)
    matrix = tmp_path / "m.yaml"
    matrix.write_text("name: x\ndefaults: {os: debian12, python: '3.11', cuda: cpu, backend: classic}\n"
                      "matrix: {torch: ['2.13.0']}\n")
    reads: list[int] = []

    def read() -> set[str]:
        reads.append(1)
        return building._named_backends(matrix)

    assert cache.matrix_backends(matrix, read) == {"classic"} and len(reads) == 1
    assert cache.matrix_backends(matrix, read) == {"classic"} and len(reads) == 1  # from the cache
    code = ("import sys\n"
            "from pathlib import Path\n"
            "from imagebuild.inputs import BuildInputs\n"
            "from imagebuild.pipeline.building import concrete_backend\n"
            "from imagebuild.pipeline.settings import BuildSettings\n"
            f"inputs = concrete_backend(Path({str(matrix)!r}), BuildInputs(), BuildSettings(), print)\n"
            "print(inputs.backend, 'imagebuild.matrix.doc' in sys.modules)\n")
    out = _fresh(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", "False"]  # the rows name classic: left as it is, the matrix not loaded
    matrix.write_text(matrix.read_text().replace("backend: classic", "backend: buildkit"))
    assert cache.matrix_backends(matrix, read) == {"buildkit"} and len(reads) == 2
    monkeypatch.setenv("IMAGEBUILD_NO_PLAN_CACHE", "1")
    assert cache.matrix_backends(matrix, read) == {"buildkit"} and len(reads) == 3


def test_a_bad_matrix_is_still_refused_before_anything_is_asked(tmp_path, monkeypatch):
    from imagebuild.errors import MatrixError

    monkeypatch.setenv("IMAGEBUILD_CACHE_DIR", str(tmp_path / "cache"))
    matrix = tmp_path / "m.yaml"
    matrix.write_text("name: [unclosed\n")
    with pytest.raises(MatrixError):
        building.concrete_backend(matrix, BuildInputs(), BuildSettings(), print)
    with pytest.raises(MatrixError):  # not cached: asked again, refused again
        building.concrete_backend(matrix, BuildInputs(), BuildSettings(), print)


def _run(engine: FakeEngine, plan, tmp_path: Path, **kw):
    opts = BuildOptions(log_dir=tmp_path / "logs", check_disk=False, revision="abc", created="2026-01-01T00:00:00Z",
                        proxies={}, **kw)
    return build_plan(engine, plan, opts, Progress())


def test_an_alias_the_engine_lists_on_the_image_is_not_tagged_again(tmp_path):
    engine = FakeEngine()
    engine.add_image(BASE_REF, {})
    [base] = chain("a", flavors=("base",), aliases=("a-base-alias",))
    plan = plan_of([base])
    [built] = _run(engine, plan, tmp_path)
    assert built.status == "built" and engine.tags["ibtest:a-base-alias"] == built.image_id
    engine.tag_calls.clear()
    [again] = _run(engine, plan, tmp_path)  # the fake's inspect does not list tags: tagged as before
    assert again.status == "up-to-date" and engine.tag_calls == [(built.image_id, "ibtest", "a-base-alias")]
    engine.tag_calls.clear()
    engine.images_by_id[built.image_id]["RepoTags"] = [base.tag, "ibtest:a-base-alias"]  # what the engine says
    [noop] = _run(engine, plan, tmp_path)
    assert noop.status == "up-to-date" and engine.tag_calls == []
    engine.images_by_id[built.image_id]["RepoTags"] = [base.tag]  # the alias moved away: tagged back
    [moved] = _run(engine, plan, tmp_path)
    assert moved.status == "up-to-date" and engine.tag_calls == [(built.image_id, "ibtest", "a-base-alias")]


def test_what_a_tag_named_before_is_asked_only_of_the_images_the_run_may_build():
    engine = FakeEngine()
    a = chain("a")
    plan = plan_of(a)
    for img in a:
        engine.add_image(img.tag, {})
    asked: list[str] = []
    image_id = engine.image_id

    def counting(ref: str):
        asked.append(ref)
        return image_id(ref)

    engine.image_id = counting  # type: ignore[method-assign]
    selection = select_images(plan, ("a-runtime",), "m.yaml")
    assert set(previous_ids(engine, selection.with_parents)) == {a[0].tag, a[1].tag}
    assert asked == [a[0].tag, a[1].tag]  # not the dev image: --only leaves it alone


def test_a_run_with_every_image_here_asks_neither_the_registry_nor_the_engines_version(tmp_path, monkeypatch):
    engine = FakeEngine()
    engine.add_image(BASE_REF, {})
    a = chain("a")
    plan = plan_of(a)
    _run(engine, plan, tmp_path)  # built once
    asked: list[str] = []
    monkeypatch.setattr(engine, "pulls_zstd", lambda: asked.append("version") or True)
    monkeypatch.setattr(building, "find_in_registry", lambda *a, **k: asked.append("registry") or {})
    monkeypatch.setattr(building, "unreachable", lambda *a, **k: {})  # the OS image's registry: not asked here
    selection = select_images(plan, (), "m.yaml")
    run = building.build_step(engine, plan, selection, BuildSettings(registry_cache=True), None, Progress(),
                              tmp_path / "logs", print)
    assert [r.status for r in run.results] == ["up-to-date"] * 3 and asked == []
    engine.remove(a[2].tag)  # one image missing: the registry is asked (with the engine's answer about zstd)
    engine.images_by_id = {k: v for k, v in engine.images_by_id.items() if k != run.results[2].image_id}
    building.build_step(engine, plan, selection, BuildSettings(registry_cache=True), None, Progress(),
                        tmp_path / "logs", print)
    assert asked == ["version", "registry"]


def test_the_revision_is_asked_when_the_first_image_is_built_not_before(tmp_path, monkeypatch):
    from imagebuild.builder import state

    asked: list[int] = []
    monkeypatch.setattr(state, "revision_arg", lambda options: asked.append(1) or "r1")
    engine = FakeEngine()
    engine.add_image(BASE_REF, {})
    plan = plan_of(chain("a"))
    run = RunState(engine, plan, BuildOptions(log_dir=tmp_path, check_disk=False, proxies={}), Progress())
    assert asked == []
    assert run.revision == "r1" and run.revision == "r1" and asked == [1]  # once per run
    opts = BuildOptions(log_dir=tmp_path / "logs", check_disk=False, created="2026-01-01T00:00:00Z", proxies={})
    build_plan(engine, plan, opts, Progress())
    assert asked == [1, 1] and engine.builds[0]["buildargs"]["REVISION"] == "r1"
    asked.clear()
    build_plan(engine, plan, opts, Progress())  # every image up to date: no `git`
    assert asked == []
