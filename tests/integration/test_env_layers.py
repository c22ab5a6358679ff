"""The runtime's Python environment in layers that follow change (issue 24, item 1), on real engines.

On each backend the session's CPU runtime (conftest.cpu_build on the classic engine, conftest.bk_build on the modern
one: images/cpu.yaml, torch 2.13.0 CPU from the wheelhouse, tiers torch + matrix-numpy: one layer per matrix package)
is rebuilt ONCE with one package (six) added to the matrix's pip_packages (on BuildKit, the runtime's env image of the
session's build is taken again by its key, not exported again): every layer up to numpy's keeps its diff ID,
six's layer comes next and only it (and the small steps above it) is new; the tiers' file sets are disjoint (no upper
layer rewrites a lower one's file); `pip check` passes in the rebuilt image; its build report names each environment layer with its size. One
runtime build per backend (the base is up to date: same inputs hash): BuildKit's, the default backend, in make test;
the classic builder's in the full tier (make test-all). The rebuild has its own records and
registry namespace, so the session's tags and records still name the images/cpu.yaml builds.

Not in CI: the same layer list from a second fresh BuildKit engine (`make e2e-layers`, tests/e2e/e2e_env_layers.py).
"""

from __future__ import annotations

import json
import secrets
import tarfile
from pathlib import Path
from typing import Any

import pytest
import zstandard
from _helpers import BK_CONFIG, BK_HOST, ROOT, imagebuild

from imagebuild.report.layers import tier_steps

TIERS = ("torch", "matrix-numpy")  # the CPU runtime's tiers, in layer order (no nvidia wheels, torch family or TE)
PLUS_SIX = (*TIERS, "matrix-six")  # its rebuild with six: one layer more, six's
INPUTS_HASH = "io.imagebuild.inputs-hash"


def _matrix_plus_six(folder: Path) -> Path:
    """images/cpu.yaml with one more runtime pip package (base and its inputs hash unchanged)."""
    text = (ROOT / "images" / "cpu.yaml").read_text()
    old = "runtime: [numpy]"
    assert old in text, f"images/cpu.yaml changed: update {old!r} here"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cpu.yaml").write_text(text.replace(old, "runtime: [numpy, six]"))
    return folder / "cpu.yaml"


def _rebuild(cpu_build, tmp: Path, env: dict[str, str], *backend: str) -> dict:
    """The runtime of images/cpu.yaml + six, built once (its parent base up to date); its report row."""
    args = cpu_build.build_args()
    for flag, value in (("--matrix", str(_matrix_plus_six(tmp / "matrix"))),
                        ("--registry", f"{cpu_build.registry.address}/ibtest-layers-{secrets.token_hex(4)}"),
                        ("--log-dir", str(tmp / "logs")), ("--report-dir", str(tmp / "report"))):
        args[args.index(flag) + 1] = value
    result = imagebuild("build", *args, "--only", "*-runtime", "--no-sbom", "--no-registry-cache", *backend,
                        env={**env, "IMAGEBUILD_STATE_DIR": str(tmp / "state")}, timeout=3600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp / "report" / "build-report.json").read_text())
    rows = {img["flavor"]: img for img in report["images"]}
    # the report has a row for every image of the plan: dev, not selected, is "skipped" (never built here)
    assert rows.get("dev", {}).get("status") in (None, "skipped") and rows["runtime"]["status"] == "built"
    assert rows.get("base", {}).get("status") != "built", rows.get("base")  # up to date: one build, the runtime
    print(f"\n[layers] +six {' '.join(backend)}: runtime {rows['runtime']['build_seconds']:.0f} s, "
          f"env layers {rows['runtime'].get('env_layers')}")
    return rows["runtime"]


def _first_runtime(client, image_id: str, inputs_hash: str) -> str:
    """`image_id`, checked to be the session's images/cpu.yaml runtime (the inputs hash it was built for)."""
    assert client.api.inspect_image(image_id)["Config"]["Labels"][INPUTS_HASH] == inputs_hash
    return image_id


def _saved_layers(client, image_id: str, tmp: Path,
                  tiers: tuple[str, ...] = TIERS) -> tuple[list[str], dict[str, int], dict[str, set[str]]]:
    """`docker save` of the image: (diff IDs, tier -> index into them, tier -> the files its layer holds)."""
    archive = tmp / "image.tar"
    with archive.open("wb") as f:
        for chunk in client.api.get_image(image_id):
            f.write(chunk)
    with tarfile.open(archive) as tar:
        [manifest] = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        config = json.load(tar.extractfile(manifest["Config"]))  # type: ignore[arg-type]
        made = [h.get("created_by") for h in config["history"] if not h.get("empty_layer")]
        diff_ids = config["rootfs"]["diff_ids"]
        assert len(made) == len(diff_ids) == len(manifest["Layers"])
        steps = tier_steps(made, len(tiers))
        assert steps is not None, made
        files: dict[str, set[str]] = {}
        for tier, index in zip(tiers, steps, strict=True):
            raw = tar.extractfile(manifest["Layers"][index])
            assert raw is not None
            if raw.read(4) == b"\x28\xb5\x2f\xfd":  # zstd: the BuildKit backend's layers (argv.EXPORT_OPTIONS)
                raw.seek(0)
                stream: Any = zstandard.ZstdDecompressor().stream_reader(raw)
            else:
                raw.seek(0)
                stream = raw
            with tarfile.open(fileobj=stream, mode="r|*") as layer:
                files[tier] = {m.name.lstrip("./") for m in layer if not m.isdir()}
    archive.unlink()
    return diff_ids, dict(zip(tiers, steps, strict=True)), files


def _check_layers(client, first_id: str, second: dict, tmp: Path) -> None:
    """first_id: the session's runtime; second: the report row of its rebuild with one package more."""
    diff_ids, index, files = _saved_layers(client, first_id, tmp)
    # no upper layer rewrites a lower one's file; each tier's own list of what it holds is in its layer
    assert not files["torch"] & files["matrix-numpy"], sorted(files["torch"] & files["matrix-numpy"])[:10]
    assert "opt/venv/.imagebuild-layers/torch.txt" in files["torch"]
    assert "opt/venv/.imagebuild-layers/matrix-numpy.txt" in files["matrix-numpy"]
    assert any("/site-packages/torch/" in f for f in files["torch"])
    assert any("/site-packages/numpy/" in f for f in files["matrix-numpy"])
    assert not any("/site-packages/numpy/" in f for f in files["torch"])
    after, index_after, files_after = _saved_layers(client, second["image_id"], tmp, PLUS_SIX)
    six = index_after["matrix-six"]
    assert six == index["matrix-numpy"] + 1 and any("/site-packages/six" in f for f in files_after["matrix-six"])
    assert not files_after["matrix-six"] & (files["torch"] | files["matrix-numpy"])
    changed = [n for n, (a, b) in enumerate(zip(diff_ids, after, strict=False)) if a != b]
    assert changed and changed[0] == six, (changed, index_after)  # every layer up to numpy's kept, six's is new
    assert diff_ids[:six] == after[:six]
    # the report names each environment layer and its size, from the built image
    assert [layer["tier"] for layer in second["env_layers"]] == list(PLUS_SIX)
    assert all(layer["size"] > 0 for layer in second["env_layers"])
    # pip check in the image: the tiers installed with --no-deps still make one consistent environment
    out = client.containers.run(second["image_id"], ["-m", "pip", "check"], entrypoint="/opt/venv/bin/python",
                                network_mode="none", remove=True)
    assert b"No broken requirements found" in out
    out = client.containers.run(second["image_id"], ["-c", "import six, numpy, torch; print(torch.__version__)"],
                                entrypoint="/opt/venv/bin/python", network_mode="none", remove=True)
    assert b"2.13.0" in out


@pytest.mark.full_tier
def test_classic_builder_keeps_every_layer_below_the_changed_tier(cpu_build, client, tmp_path):
    assert cpu_build.result.returncode == 0, cpu_build.result.stderr[-3000:]
    [runtime] = [img for img in cpu_build.plan.images if img.flavor == "runtime"]
    first = _first_runtime(client, client.api.inspect_image(runtime.tag)["Id"], runtime.inputs_hash)
    second = _rebuild(cpu_build, tmp_path, {}, "--backend", "classic")
    _check_layers(client, first, second, tmp_path)


def test_buildkit_keeps_every_layer_below_the_changed_tier(cpu_build, bk_build, tmp_path):
    result, bk_client, bk_dir = bk_build
    assert result.returncode == 0, result.stderr[-3000:]
    # the session's BuildKit runtime by the ID its build reported (another test re-tags images on that engine)
    report = json.loads((bk_dir / "report" / "build-report.json").read_text())
    [first] = [img for img in report["images"] if img["flavor"] == "runtime"]
    assert [layer["tier"] for layer in first["env_layers"]] == list(TIERS)
    [runtime] = [img for img in cpu_build.plan.images if img.flavor == "runtime"]
    assert first["tag"] == runtime.tag and first["status"] == "built"
    first_id = _first_runtime(bk_client, first["image_id"], first["inputs_hash"])
    bk = {"DOCKER_HOST": BK_HOST, "DOCKER_CONFIG": BK_CONFIG}
    second = _rebuild(cpu_build, tmp_path, bk, "--backend", "buildkit")
    _check_layers(bk_client, first_id, second, tmp_path)
    # the torch and numpy tiers: the same layers
    assert [x["size"] for x in first["env_layers"]] == [x["size"] for x in second["env_layers"][:2]]
    # the env image (the compilers and the torch tier, envimage.py): built once by the session's build, taken again
    # by its key for the rebuild, whose export then re-dated only the layers above it
    assert _env_rows(first) == [False], first["phases"]
    assert _env_rows(second) == [True], second["phases"]
    assert not [p for p in second["phases"] if p["name"].startswith("env image: ")], second["phases"]


def _env_rows(row: dict) -> list[bool]:
    """The env image's phase rows of a build report row: taken again (True) or built (False), one per build."""
    return [p["cached"] for p in row["phases"] if p["kind"] == "env"]
