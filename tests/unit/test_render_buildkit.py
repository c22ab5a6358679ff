"""Rendering for the BuildKit backend: cache mounts and build secrets there, nothing of it on the classic builder;
the matrix's `backend` field and `--backend` choose it."""

from __future__ import annotations

from dataclasses import replace
from textwrap import dedent

import pytest
from _render_cases import CPU, CU128_TE

from imagebuild.backends import backend_of, plan_backend
from imagebuild.errors import UsageError
from imagebuild.inputs import BuildInputs
from imagebuild.matrix import parse_matrix
from imagebuild.models import Plan
from imagebuild.render import render_image
from imagebuild.render.te_wheel import render_te_wheel
from imagebuild.resolve import resolve_matrix

SECRET = "https://user:Pa55w0rdXYZ@pypi.corp.example/simple"
BUILDKIT = BuildInputs(pip_extra_index_urls=(SECRET,), backend="buildkit")


def test_buildkit_pip_stage_mounts_the_cache_and_reads_the_index_as_a_secret():
    rendered = render_image(CPU, "runtime", BUILDKIT)
    text = rendered.dockerfile
    assert "Pa55w0rdXYZ" not in text
    assert "ARG PIP_EXTRA_INDEX_URL" in text  # a public index may still come as a build argument
    assert "--mount=type=cache,id=imagebuild-pip,target=/root/.cache/pip" in text
    assert "--mount=type=secret,id=pip_extra_index_url" in text
    assert 'PIP_EXTRA_INDEX_URL="$(cat /run/secrets/pip_extra_index_url)"' in text
    assert "env -u PIP_NO_CACHE_DIR /opt/venv/bin/python -m pip install" in text
    assert "--no-cache-dir" not in text.split("pip install", 1)[1].split("\n")[1]
    assert rendered.secret_build_args == {"PIP_EXTRA_INDEX_URL": SECRET + " https://download.pytorch.org/whl/cpu"}


def test_classic_rendering_has_no_buildkit_syntax():
    text = render_image(CPU, "runtime", replace(BUILDKIT, backend=None)).dockerfile
    assert "--mount=" not in text and "/run/secrets" not in text and "env -u" not in text
    assert "ARG PIP_EXTRA_INDEX_URL" in text


def test_the_te_wheel_build_reads_the_same_secrets():
    rendered = render_te_wheel(CU128_TE, BUILDKIT)
    assert rendered is not None
    assert rendered.dockerfile.count("--mount=type=secret,id=pip_extra_index_url") == 2  # pip stage + te-build


def test_backend_choice_cli_over_matrix():
    bk = replace(CPU, backend="buildkit")
    assert backend_of(bk, BuildInputs()) == "buildkit"
    assert backend_of(bk, BuildInputs(backend="classic")) == "classic"
    assert backend_of(CPU, BuildInputs()) == "classic"
    auto = replace(CPU, backend="auto")  # not resolved (render, plan): renders as the classic builder, as before
    assert backend_of(auto, BuildInputs()) == "classic" and backend_of(auto, BuildInputs(backend="auto")) == "classic"
    assert backend_of(auto, BuildInputs(backend="buildkit")) == "buildkit"
    assert "backend" not in BuildInputs().public()  # records of classic builds stay as they were
    assert BuildInputs(backend="buildkit").public()["backend"] == "buildkit"


def test_a_plan_mixing_backends_needs_the_flag():
    from _support import image

    one, two = image("a", "base", None), image("b", "base", None)
    two = replace(two, variant=replace(two.variant, backend="buildkit"))
    plan = Plan(matrix_file="m.yaml", images=[one, two])
    with pytest.raises(UsageError, match="different backends .*--backend"):
        plan_backend(plan, BuildInputs())
    assert plan_backend(plan, BuildInputs(backend="buildkit")) == "buildkit"


MATRIX = """\
name: pytorch-cpu
defaults: {{os: debian12, python: '3.11', cuda: cpu, backend: {backend}}}
matrix: {{torch: ['2.13.0']}}
"""


def test_matrix_backend_field():
    [variant] = resolve_matrix(parse_matrix(dedent(MATRIX.format(backend="buildkit")), "m.yaml"))
    assert variant.backend == "buildkit"
    [variant] = resolve_matrix(parse_matrix(dedent(MATRIX.format(backend="auto")), "m.yaml"))
    assert variant.backend == "auto"
    [variant] = resolve_matrix(parse_matrix(dedent(MATRIX.format(backend="x").replace(", backend: x", "")), "m.yaml"))
    assert variant.backend == "auto"  # the default: a build resolves it (pipeline/building.py: concrete_backend)
    from imagebuild.errors import MatrixError

    with pytest.raises(MatrixError) as err:
        resolve_matrix(parse_matrix(dedent(MATRIX.format(backend="kaniko")), "m.yaml"))
    [problem] = err.value.problems
    assert "defaults.backend" in str(problem) and "valid choices: auto, classic, buildkit" in str(problem)
