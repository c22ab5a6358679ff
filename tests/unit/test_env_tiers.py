"""The runtime environment's tiers: which tiers an image has (render/tiers.py), which package lands in which tier
(render/tiering.py, the script the resolve stage runs) and the layers as built (report/layers.py)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
from _render_cases import CPU, CU128_TE

from imagebuild.render import render_image, tiering, tiers
from imagebuild.report.layers import (
    env_layers,
    format_layers,
    is_tier_copy,
    limit_problem,
    over_limit,
    planned_layers,
    tier_steps,
)

TIERS = [
    {"name": "nvidia", "owns": ["nvidia-*"], "requires": []},
    {"name": "torch", "owns": ["torch", "triton"], "requires": ["torch==2.9.1"]},
    {"name": "torch-family", "owns": ["torchvision", "torchaudio"], "requires": ["torchvision==0.24.1"]},
    {"name": "matrix", "owns": [], "requires": ["numpy", "six"]},
]
NVIDIA = {"nvidia-cublas-cu12": "12.8.4.1", "nvidia-cudnn-cu12": "9.10.2.21"}
TORCH_ENV = {**NVIDIA, "torch": "2.9.1", "triton": "3.5.1", "sympy": "1.13.3", "filelock": "3.20.0"}
FAMILY_ENV = {**TORCH_ENV, "torchvision": "0.24.1", "numpy": "2.3.4", "pillow": "12.0.0"}


def fake_resolver(envs: dict[str, dict[str, str]]):
    """A pip that answers each tier's requirements with a fixed environment (keyed by the last tier it asks for)."""
    asked: list[list[str]] = []

    def resolve(requirements):
        asked.append(list(requirements))
        if any(r.startswith("torchvision") for r in requirements):
            return dict(envs["family"])
        if any(r.startswith("torch==") for r in requirements):
            return dict(envs["torch"])
        return dict(envs["nvidia"])
    return resolve, asked


def split(final: dict[str, str], envs: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    resolve, _ = fake_resolver(envs)
    names = tiering.assign(TIERS, final, tiering.tier_environments(TIERS, final, resolve))
    return {t["name"]: n for t, n in zip(TIERS, names, strict=True)}


ENVS = {"nvidia": NVIDIA, "torch": TORCH_ENV, "family": FAMILY_ENV}


def test_each_package_lands_in_the_lowest_tier_that_has_it_at_its_final_version():
    final = {**FAMILY_ENV, "six": "1.17.0"}
    got = split(final, ENVS)
    assert got == {"nvidia": ["nvidia-cublas-cu12", "nvidia-cudnn-cu12"],
                   "torch": ["filelock", "sympy", "torch", "triton"],
                   "torch-family": ["numpy", "pillow", "torchvision"],
                   "matrix": ["six"]}
    # every package exactly once: the tiers' file sets cannot overlap
    assert sorted(n for names in got.values() for n in names) == sorted(final)


def test_a_package_an_upper_tier_upgrades_belongs_to_that_tier():
    # the matrix asks for sympy 1.14: torch alone resolves 1.13.3, so sympy is the matrix tier's (not rewritten
    # over the torch layer), and numpy upgraded by the matrix leaves the torch family's tier for the matrix's
    final = {**FAMILY_ENV, "sympy": "1.14.0", "numpy": "2.4.0", "six": "1.17.0"}
    got = split(final, ENVS)
    assert got["torch"] == ["filelock", "torch", "triton"]
    assert got["torch-family"] == ["pillow", "torchvision"]
    assert got["matrix"] == ["numpy", "six", "sympy"]
    # a downgrade is the same: the version is the upper tier's decision
    got = split({**FAMILY_ENV, "filelock": "3.0.0"}, ENVS)
    assert "filelock" in got["matrix"] and "filelock" not in got["torch"]


def test_one_more_matrix_package_leaves_every_lower_tier_file_as_it_was():
    before = split({**FAMILY_ENV, "six": "1.17.0"}, ENVS)
    after = split({**FAMILY_ENV, "six": "1.17.0", "pyyaml": "6.0.3"}, ENVS)
    assert {k: v for k, v in after.items() if k != "matrix"} == {k: v for k, v in before.items() if k != "matrix"}
    assert after["matrix"] == ["pyyaml", "six"]


def test_each_tier_is_resolved_from_its_own_and_the_lower_tiers_requirements_with_owned_packages_pinned():
    final = {**FAMILY_ENV, "six": "1.17.0"}
    resolve, asked = fake_resolver(ENVS)
    envs = tiering.tier_environments(TIERS, final, resolve)
    assert sorted(envs) == [0, 1, 2]  # the last tier's environment is the final one, never resolved again
    assert asked[0] == ["nvidia-cublas-cu12==12.8.4.1", "nvidia-cudnn-cu12==9.10.2.21"]
    assert asked[1] == asked[0] + ["torch==2.9.1", "torch==2.9.1", "triton==3.5.1"]
    assert asked[2][-2:] == ["torchvision==0.24.1", "torchvision==0.24.1"]
    # a tier with neither requirements nor owned packages (no nvidia wheels on CPU) is not resolved
    cpu_final = {"torch": "2.13.0+cpu", "sympy": "1.14.0", "numpy": "2.4.6"}
    resolve, asked = fake_resolver({"nvidia": {}, "torch": {"torch": "2.13.0+cpu", "sympy": "1.14.0"}, "family": {}})
    cpu_tiers = [TIERS[0], TIERS[1], TIERS[3]]  # as rendered for CPU (no torch family), with an empty first tier
    envs = tiering.tier_environments(cpu_tiers, cpu_final, resolve)
    assert sorted(envs) == [1] and asked == [["torch==2.9.1", "torch==2.13.0+cpu"]]


def test_names_are_compared_canonically_and_owned_by_glob():
    assert tiering.canonical("Transformer_Engine.Torch") == "transformer-engine-torch"
    te = [{"name": "te", "owns": ["transformer-engine", "transformer-engine-*"]}]
    assert tiering.owner("transformer_engine_cu12", te) == 0 and tiering.owner("transformer_engine", te) == 0
    assert tiering.owner("torch", te) is None


CUDA_WHEELS = {  # every nvidia-* wheel torch 2.9 (CUDA 12.8) and torch 2.13 (CUDA 13) ask for -> its tier
    "nvidia-cuda-runtime": "nvidia", "nvidia-cuda-runtime-cu12": "nvidia", "nvidia-cuda-nvrtc": "nvidia",
    "nvidia-nvjitlink-cu12": "nvidia", "nvidia-cuda-cupti": "nvidia", "nvidia-curand-cu12": "nvidia",
    "nvidia-cufft": "nvidia", "nvidia-cufft-cu12": "nvidia", "nvidia-cufile": "nvidia", "nvidia-nvtx-cu12": "nvidia",
    "nvidia-cusparselt-cu13": "nvidia", "nvidia-cusparselt-cu12": "nvidia",  # cuSPARSELt is not cuSPARSE
    "nvidia-cublas": "nvidia-cublas", "nvidia-cublas-cu12": "nvidia-cublas",
    "nvidia-cusolver": "nvidia-solvers", "nvidia-cusolver-cu12": "nvidia-solvers",
    "nvidia-cusparse": "nvidia-solvers", "nvidia-cusparse-cu12": "nvidia-solvers",
    "nvidia-cudnn-cu13": "nvidia-cudnn", "nvidia_cudnn_cu12": "nvidia-cudnn",
    "nvidia-nccl-cu13": "nvidia-nccl", "nvidia-nccl-cu12": "nvidia-nccl", "nvidia-nvshmem-cu13": "nvidia-nccl",
}


def cuda_spec(*above: tiers.Tier) -> list[dict]:
    """The resolve stage's spec of a CUDA runtime: the nvidia tiers, torch, then `above`."""
    torch = tiers.Tier("torch", "torch", owns=("torch",), requires=("torch==2.13.0",))
    return json.loads(tiers.spec_file([*tiers.NVIDIA_TIERS, torch, *above]))["tiers"]


@pytest.mark.parametrize("wheel", sorted(CUDA_WHEELS))
def test_each_cuda_wheel_goes_to_the_tier_that_names_it_most_closely(wheel):
    spec = json.loads(tiers.spec_file(tiers.NVIDIA_TIERS))["tiers"]
    assert spec[tiering.owner(wheel, spec)]["name"] == CUDA_WHEELS[wheel]


@pytest.mark.parametrize("package", ["nvidia-ml-py", "nvidia-dali-cuda120", "nvidia-modelopt"])
def test_an_nvidia_package_the_matrix_adds_gets_its_own_layer_and_the_cuda_layers_stay(package):
    """Not a CUDA library wheel: no tier owns it, so it goes where any matrix package goes (its own layer), and the
    nvidia tier files are the same with it as without it."""
    spec = cuda_spec(*tiers.matrix_tiers([package]))
    assert tiering.owner(package, spec) is None
    base = {"nvidia-cuda-runtime": "13.0.96", "nvidia-cublas": "13.1.0.3", "torch": "2.13.0"}

    def files(final):
        def resolve(requirements):  # pip: each tier's own environment has what it asked for, nothing above it
            return {n: v for n, v in final.items() if n != package or any(r.startswith(package) for r in requirements)}
        return dict(zip([t["name"] for t in spec],
                        tiering.assign(spec, final, tiering.tier_environments(spec, final, resolve)), strict=True))
    before, after = files(base), files({**base, package: "1.0"})
    assert after[f"matrix-{package}"] == [package]
    assert all(before[t["name"]] == after[t["name"]] for t in spec[:6])


def test_the_closest_pattern_wins_whatever_the_order_and_a_tie_goes_to_the_lowest_tier():
    rest, cudnn = {"name": "rest", "owns": ["nvidia-*"]}, {"name": "cudnn", "owns": ["nvidia-cudnn-*"]}
    assert tiering.owner("nvidia-cudnn-cu13", [rest, cudnn]) == 1
    assert tiering.owner("nvidia-cudnn-cu13", [cudnn, rest]) == 0
    assert tiering.owner("nvidia-cublas", [rest, cudnn]) == 0
    same = [{"name": "a", "owns": ["nvidia-*"]}, {"name": "b", "owns": ["nvidia-*"]}]
    assert tiering.owner("nvidia-cublas", same) == 0


def test_a_run_of_tiers_that_only_own_is_resolved_once_at_its_top():
    """The five nvidia tiers: one resolution of all their wheels, not five; what their wheels bring that no tier owns
    (here `cuda-pathfinder`) lands in the run's top tier, and every tier keeps its own wheels."""
    spec = cuda_spec()
    nvidia = {"nvidia-cuda-runtime": "13.0.96", "nvidia-cublas": "13.1.0.3", "nvidia-cusolver": "12.0.4.66",
              "nvidia-cudnn-cu13": "9.13.0.50", "nvidia-nccl-cu13": "2.27.7", "cuda-pathfinder": "1.3.0"}
    final = {**nvidia, "torch": "2.13.0", "sympy": "1.14.0"}
    asked: list[list[str]] = []

    def resolve(requirements):
        asked.append(list(requirements))
        return dict(nvidia)
    envs = tiering.tier_environments(spec, final, resolve)
    assert list(envs) == [4] and len(asked) == 1 and len(asked[0]) == 5
    names = dict(zip([t["name"] for t in spec], tiering.assign(spec, final, envs), strict=True))
    assert names == {"nvidia": ["nvidia-cuda-runtime"], "nvidia-cublas": ["nvidia-cublas"],
                     "nvidia-solvers": ["nvidia-cusolver"], "nvidia-cudnn": ["nvidia-cudnn-cu13"],
                     "nvidia-nccl": ["cuda-pathfinder", "nvidia-nccl-cu13"], "torch": ["sympy", "torch"]}


def test_a_newer_nccl_wheel_changes_the_nccl_tier_file_alone():
    """A torch release that moves its NCCL pin alone rewrites one tier file of the five: every other tier stage is a
    cache hit and its layer keeps its digest, so a node that held the image pulls NCCL's layer alone."""
    spec = cuda_spec()
    nvidia = {"nvidia-cuda-runtime": "13.0.96", "nvidia-cublas": "13.1.0.3", "nvidia-cusparse": "12.6.3.3",
              "nvidia-cudnn-cu13": "9.13.0.50", "nvidia-nccl-cu13": "2.27.7", "nvidia-nvshmem-cu13": "3.3.24"}

    def files(final):
        envs = tiering.tier_environments(spec, final, lambda requirements: dict(final))
        return [tiering.tier_text(names, final, {}) for names in tiering.assign(spec, final, envs)]
    before = files({**nvidia, "torch": "2.13.0", "sympy": "1.14.0"})
    after = files({**nvidia, "nvidia-nccl-cu13": "2.28.3", "torch": "2.13.0", "sympy": "1.14.0"})
    changed = [t["name"] for t, old, new in zip(spec, before, after, strict=True) if old != new]
    assert changed == ["nvidia-nccl"] and "nvidia-nccl-cu13==2.28.3\n" in after[4]


def test_a_lock_gives_the_final_environment_and_each_tier_file_keeps_the_hashes():
    text = ("# imagebuild lock\nTorch==2.13.0+cpu \\\n    --hash=sha256:" + "a" * 64 + "\n"
            "numpy==2.4.6 \\\n    --hash=sha256:" + "b" * 64 + "\n")
    locked = tiering.read_lock(text)
    assert locked == {"torch": ("2.13.0+cpu", ["a" * 64]), "numpy": ("2.4.6", ["b" * 64])}
    final = {n: v for n, (v, _) in locked.items()}
    hashes = {n: h for n, (_, h) in locked.items()}
    assert tiering.tier_text(["numpy"], final, hashes) == f"numpy==2.4.6 --hash=sha256:{'b' * 64}\n"
    assert tiering.tier_text([], final, hashes) == ""


def test_main_writes_one_file_per_tier(tmp_path, monkeypatch):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"tiers": [TIERS[1], TIERS[3]]}))
    answers = {True: {"torch": "2.9.1", "sympy": "1.13.3", "numpy": "2.3.4", "six": "1.17.0"},
               False: {"torch": "2.9.1", "sympy": "1.13.3"}}
    monkeypatch.setattr(tiering, "pip_environment", lambda *a: ({}, False))
    monkeypatch.setattr(tiering, "pip_resolver", lambda *a: lambda reqs: dict(answers["six" in reqs]))
    assert tiering.main([str(spec), str(tmp_path / "out"), "--", "--find-links", "/w"]) == 0
    assert (tmp_path / "out" / "torch.txt").read_text() == "sympy==1.13.3\ntorch==2.9.1\n"
    assert (tmp_path / "out" / "matrix.txt").read_text() == "numpy==2.3.4\nsix==1.17.0\n"


def test_the_render_has_only_the_tiers_with_something_to_hold():
    cpu = render_image(replace(CPU, pip_packages={"runtime": ("numpy",)}), "runtime")
    assert [name for name, _ in cpu.env_layers] == ["torch", "matrix-numpy"]
    assert "AS tier-nvidia" not in cpu.dockerfile and "COPY --from=tier-matrix-numpy /opt/stage/ /" in cpu.dockerfile
    spec = json.loads(cpu.context_files[tiers.SPEC])
    assert [t["requires"] for t in spec["tiers"]] == [["torch==2.13.0+cpu"], ["numpy"]]
    # each matrix package in a layer of its own, by name: one more package is one more layer, the others unchanged
    two = render_image(replace(CPU, pip_packages={"runtime": ("six==1.17.0", "numpy", "Py_YAML>=6")}), "runtime")
    assert [name for name, _ in two.env_layers] == ["torch", "matrix-numpy", "matrix-py-yaml", "matrix-six"]
    spec = json.loads(two.context_files[tiers.SPEC])
    assert [t["requires"] for t in spec["tiers"]] == [["torch==2.13.0+cpu"], ["numpy"], ["Py_YAML>=6"],
                                                      ["six==1.17.0"]]
    assert cpu.context_files[tiers.SCRIPT] == tiers.script_file()
    no_pip = replace(CPU, pip_packages={})
    assert [name for name, _ in render_image(no_pip, "runtime").env_layers] == ["torch"]
    te = render_image(CU128_TE, "runtime")
    nvidia = ["nvidia", "nvidia-cublas", "nvidia-solvers", "nvidia-cudnn", "nvidia-nccl"]
    assert [name for name, _ in te.env_layers] == [*nvidia, "torch", "torch-family", "transformer-engine"]
    # the tiers come in that order in the env stage, after torch.compile's apt layer; the env-key stage lists
    # their pinned files; the matrix's tiers are the final stage's, which stands on the env stage
    env = te.dockerfile.split("\nFROM ${BASE_IMAGE} AS env\n", 1)[1].split("\nFROM scratch AS env-key\n")[0]
    copies = [line for line in env.splitlines() if line.startswith("COPY --from=tier-")]
    assert copies == [f"COPY --from=tier-{n} /opt/stage/ /" for n, _ in te.env_layers]
    assert env.index("apt-get install") < env.index(copies[0])
    listed = " ".join(f"/opt/tiers/{n}.txt" for n in [*nvidia, "torch", "torch-family", "transformer-engine"])
    assert f"\nFROM scratch AS env-key\nCOPY --from=resolve {listed} /\n" in te.dockerfile
    final = cpu.dockerfile.rsplit("\nFROM ${ENV_IMAGE}\n", 1)[1]
    assert [line for line in final.splitlines() if line.startswith("COPY --from=tier-")] == [
        "COPY --from=tier-matrix-numpy /opt/stage/ /"]
    assert "apt-get" not in final and "COPY --from=tier-torch " in cpu.dockerfile.split("AS env-key")[0]
    # base and dev keep their one pip stage
    assert render_image(CU128_TE, "dev").env_layers == () and "AS tier-" not in render_image(CPU, "dev").dockerfile


CLASSIC = ["/bin/sh -c #(nop) ADD file:ab in / ", "|2 A=1 /bin/sh -c apt-get install gcc",
           "/bin/sh -c #(nop) COPY dir:11 in / ", "/bin/sh -c #(nop) COPY dir:22 in / ",
           "|1 A=1 /bin/sh -c for f in ...", "/bin/sh -c #(nop) COPY file:33 in /opt/venv/lib/ "]
BUILDKIT = ["RUN /bin/sh -c apt-get install gcc # buildkit", "COPY /opt/stage/ / # buildkit",
            "COPY /opt/stage/ / # buildkit", "COPY files/imagebuild-entrypoint /usr/local/bin/ # buildkit"]


def test_the_tier_layers_are_found_in_either_builders_history():
    assert tier_steps(CLASSIC, 2) == [2, 3] and tier_steps(BUILDKIT, 2) == [1, 2]
    assert not is_tier_copy("/bin/sh -c #(nop) COPY file:33 in /opt/venv/lib/ ")
    assert not is_tier_copy("COPY files/x / # buildkit")
    # an image of another layout (one environment layer, built before tiers): nothing is claimed
    assert tier_steps(CLASSIC, 3) is None and tier_steps(CLASSIC, 0) is None
    history = [{"CreatedBy": c, "Size": n * 100} for n, c in enumerate(CLASSIC)][::-1]  # the API: newest first
    rows = env_layers(history, [("torch", "torch"), ("matrix", "numpy")])
    assert rows == [{"tier": "torch", "holds": "torch", "size": 200}, {"tier": "matrix", "holds": "numpy",
                                                                       "size": 300}]
    assert env_layers(history, [("a", ""), ("b", ""), ("c", "")]) == []


def test_the_layer_limit_names_the_image_the_layer_its_size_and_what_made_it_large():
    rows = [{"tier": "nvidia", "holds": "the NVIDIA CUDA wheels", "size": 9 * 1024**3,
             "packages": ["nvidia-cudnn-cu12==9.10", "nvidia-cublas-cu12==12.8"]},
            {"tier": "torch", "holds": "torch", "size": 1024**3}]
    assert over_limit(rows, 8 * 1024**3) == [rows[0]] and over_limit(rows, None) == []
    assert over_limit(planned_layers([("torch", "torch")]), 1) == []  # a size not known is never over
    text = limit_problem("reg/x:2.9.1-runtime", rows[0], 8 * 1024**3)
    assert "reg/x:2.9.1-runtime" in text and "'nvidia'" in text and "9.66 GB" in text and "8.59 GB" in text
    assert "nvidia-cudnn-cu12==9.10" in text
    lines = format_layers(rows, 8 * 1024**3)
    assert "OVER LIMIT" in lines[0] and "OVER LIMIT" not in lines[1]
    assert "not built" in format_layers(planned_layers([("torch", "torch")]))[0]


@pytest.mark.parametrize("flavor", ["base", "dev"])
def test_other_flavors_have_no_tiers(flavor):
    assert render_image(CPU, flavor).env_layers == ()


def test_plan_shows_each_runtime_layer_not_built_without_an_image(tmp_path):
    import subprocess
    import sys

    def plan(*extra):  # the real CLI in a process of its own (as a user runs it)
        return subprocess.run([sys.executable, "-m", "imagebuild", "plan", "--matrix", "images/cpu.yaml",
                               "--state-dir", str(tmp_path), *extra], capture_output=True, text=True, timeout=120,
                              check=True).stdout

    rows = {row["flavor"]: row for row in json.loads(plan("--json"))}
    assert [(x["tier"], x["size"]) for x in rows["runtime"]["layers"]] == [("torch", None), ("matrix-numpy", None)]
    assert "layers" not in rows["base"] and "layers" not in rows["dev"]
    text = plan()
    assert "environment layers, least changing first" in text and "not built" in text


def test_plan_sizes_come_from_the_image_in_the_engine(monkeypatch):
    from _fake_engine import FakeEngine
    from _support import image

    from imagebuild.pipeline.layers import plan_layers

    engine = FakeEngine()
    engine.histories["sha256:rt"] = [{"CreatedBy": "COPY /opt/stage/ / # buildkit", "Size": 1_020_000_000},
                                     {"CreatedBy": "RUN apt-get install gcc # buildkit", "Size": 5}]
    monkeypatch.setattr("imagebuild.engine.connect", lambda *a, **k: engine)
    img = replace(image("2.13.0-cpu-py3.11-debian12", "runtime", None), env_layers=(("torch", "torch"),))
    assert plan_layers([img], {img.id: "sha256:rt"}) == {img.id: [{"tier": "torch", "holds": "torch",
                                                                    "size": 1_020_000_000}]}
    # not in this engine, or no engine at all: not built, no size invented
    assert plan_layers([img], {img.id: "sha256:gone"})[img.id][0]["size"] is None

    def no_engine(*a, **k):
        raise ConnectionError("no engine")
    monkeypatch.setattr("imagebuild.engine.connect", no_engine)
    assert plan_layers([img], {img.id: "sha256:rt"})[img.id][0]["size"] is None


def test_the_build_report_lists_the_layers_and_flags_one_over_the_limit(tmp_path):
    from imagebuild.report.stored import load_report
    from imagebuild.report.writer import render_markdown

    row = {"tag": "r/x:2.13.0-cpu-py3.11-debian12-runtime", "flavor": "runtime", "status": "built",
           "env_layers": [{"tier": "torch", "holds": "torch", "size": 9_500_000_000, "over_limit": True},
                          {"tier": "matrix", "holds": "numpy", "size": 30_000_000}]}
    doc = {"schema": 1, "images": [row]}
    text = render_markdown(doc)
    assert "Environment layers" in text and "9.50 GB" in text and "30.00 MB" in text
    assert [line for line in text.splitlines() if "OVER LIMIT" in line] == [line for line in text.splitlines()
                                                                             if "9.50 GB" in line]
    (tmp_path / "build-report.json").write_text(json.dumps(doc))
    assert load_report(tmp_path / "build-report.json", {})["images"][0]["env_layers"][1]["size"] == 30_000_000
    row["env_layers"][0]["size"] = "big"  # a damaged report: one problem, not a traceback
    (tmp_path / "build-report.json").write_text(json.dumps(doc))
    with pytest.raises(Exception, match="env_layers"):
        load_report(tmp_path / "build-report.json", {})


def test_an_older_pip_resolves_with_a_newer_pip_in_a_scratch_folder(monkeypatch, tmp_path, capsys):
    """pip < 25.3 reads whole wheels where an index has no metadata files (< 22.2 cannot --dry-run at all): a newer
    pip fetched into the stage's scratch folder resolves; where the index has none, the venv's own pip if it can
    (said in one line), else the stage fails. The real pips: test_resolve_lazy_wheels.py."""
    import subprocess

    calls: list[list[str]] = []
    unavailable: set[str] = set()  # the pip requirements the index cannot answer

    def fake_run(argv, **kw):
        calls.append(list(argv))
        if "--target" in argv:
            asked = "pinned" if "--require-hashes" in argv else argv[-1]
            if asked not in unavailable:
                (tmp_path / "pip" / "pip").mkdir(parents=True, exist_ok=True)
            return subprocess.CompletedProcess(argv, int(asked in unavailable), stdout="",
                                               stderr="ERROR: No matching distribution")
        return subprocess.CompletedProcess(argv, 0, stdout=answer, stderr="")

    monkeypatch.setattr(tiering.subprocess, "run", fake_run)
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")  # the base image's: pip's cache kept in the scratch folder instead
    answer = "25.3\n"  # reads wheels lazily: its own pip resolves
    env, lazily = tiering.pip_environment("/opt/venv/bin/python", ["--find-links", "/w"], str(tmp_path))
    assert "PYTHONPATH" not in env and len(calls) == 1 and lazily
    assert "PIP_NO_CACHE_DIR" not in env and env["PIP_CACHE_DIR"] == str(tmp_path / "cache")
    answer = "23.0.1\n"  # Debian 12's venv: pip 26.3 in the scratch folder, never the image, pinned by sha256
    env, lazily = tiering.pip_environment("/opt/venv/bin/python", ["--find-links", "/w"], str(tmp_path))
    assert env["PYTHONPATH"] == str(tmp_path / "pip") and env["PYTHONHASHSEED"] == "0" and lazily
    assert calls[-1][:4] == ["/opt/venv/bin/python", "-m", "pip", "install"]
    assert "--target" in calls[-1] and "--require-hashes" in calls[-1] and "/w" in calls[-1]
    pinned = (tmp_path / "pip-pinned.txt").read_text()
    assert pinned.count("--hash=sha256:") == 2 and 'pip==26.3 ; python_version >= "3.10"' in pinned
    shutil.rmtree(tmp_path / "pip")
    unavailable = {"pinned", "pip>=23.1"}  # an index without pip: the venv's own pip, said once
    env, lazily = tiering.pip_environment("/opt/venv/bin/python", ["--find-links", "/w"], str(tmp_path))
    assert "PYTHONPATH" not in env and "no pip 25.3+ from the index" in capsys.readouterr().out and not lazily
    answer = "22.0.2\n"  # Ubuntu 22.04's venv: no --dry-run, and no newer pip to be had
    with pytest.raises(subprocess.CalledProcessError):
        tiering.pip_environment("/opt/venv/bin/python", ["--find-links", "/w"], str(tmp_path))
    assert ["--require-hashes" in calls[-2], calls[-1][-1]] == [True, "pip>=23.1"]
    unavailable = {"pinned"}  # a Python 3.8 venv: neither pinned pip runs there, the newest pip for 3.8 resolves
    env, lazily = tiering.pip_environment("/opt/venv/bin/python", ["--find-links", "/w"], str(tmp_path))
    assert env["PYTHONPATH"] == str(tmp_path / "pip") and calls[-1][-1] == "pip>=23.1" and not lazily
