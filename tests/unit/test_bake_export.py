"""`imagebuild bake`: bake's JSON shape, targets/tags equal to the plan, parent chaining, escaping, contexts on disk."""

from __future__ import annotations

import json
import re

from _bake_cases import make_plan

from imagebuild.builder.bake import OS_CONTEXT, PARENT_CONTEXT, bake_document, target_name, write_bake

# attributes of a bake target (https://docs.docker.com/build/bake/reference/#target)
TARGET_ATTRS = {"args", "annotations", "attest", "cache-from", "cache-to", "call", "context", "contexts",
                "description", "dockerfile", "dockerfile-inline", "entitlements", "extra-hosts", "inherits",
                "labels", "matrix", "name", "network", "no-cache", "no-cache-filter", "output", "platforms",
                "pull", "secret", "shm-size", "ssh", "tags", "target", "ulimits"}
NAME = re.compile(r"^[a-zA-Z0-9_-]+$")


def check_bake_shape(doc):
    assert set(doc) <= {"variable", "group", "target", "function"}
    targets = doc["target"]
    for name, t in targets.items():
        assert NAME.match(name), name
        assert set(t) <= TARGET_ATTRS, set(t) - TARGET_ATTRS
        assert isinstance(t["context"], str) and isinstance(t["dockerfile"], str)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in t["args"].items())
        assert all(isinstance(x, str) for x in t["tags"])
        for ref in t.get("contexts", {}).values():
            assert ref.startswith(("target:", "docker-image://"))
            if ref.startswith("target:"):
                assert ref[len("target:"):] in targets
    for name, g in doc["group"].items():
        assert NAME.match(name)
        assert all(t in targets for t in g["targets"])
    for name, v in doc.get("variable", {}).items():
        assert NAME.match(name) and "default" in v


def test_shape_targets_and_tags_equal_plan():
    plan = make_plan()
    doc = bake_document(plan, {i.id: f"ctx/{i.id}" for i in plan.images})
    check_bake_shape(json.loads(json.dumps(doc)))
    assert doc["group"]["default"]["targets"] == [target_name(i.id) for i in plan.images]
    for img in plan.images:
        t = doc["target"][target_name(img.id)]
        assert t["tags"] == [img.tag, *img.aliases]
        # each target's own up-to-date labels, so a child never shows its parent's (LABEL is inherited)
        # a default per target: the date `build` gives it (0: none given here), SOURCE_DATE_EPOCH at bake time wins
        sde = '${SOURCE_DATE_EPOCH != "" ? SOURCE_DATE_EPOCH : "0"}'
        # a root's base-id: the OS image ID the export found (none here: empty), a variable of its OS at bake time;
        # a child's: empty (not the root's, inherited)
        var = "OS_IMAGE_ID_" + target_name(img.variant.os.id)
        root = {"io.imagebuild.base-id": "" if img.parent else "${" + f'{var} != "" ? {var} : ""' + "}"}
        assert t["labels"] == {**img.labels, "io.imagebuild.inputs-hash": img.inputs_hash, **root,
                               "io.imagebuild.source-date-epoch": sde}
        assert t["args"]["SOURCE_DATE_EPOCH"] == sde
        assert t["context"] == f"ctx/{img.id}" and t["dockerfile"] == "Dockerfile"
    assert set(doc["group"]) >= {"default", "base", "runtime", "dev", "2_9_1-cpu-py3_11-debian12"}


def test_parent_chain_through_named_contexts():
    plan = make_plan()
    doc = bake_document(plan, {i.id: i.id for i in plan.images}, os_images={"debian12": "reg/os/debian:12"})
    by_tag = {i.tag: i for i in plan.images}
    for img in plan.images:
        t = doc["target"][target_name(img.id)]
        if img.parent:
            assert t["args"]["BASE_IMAGE"] == PARENT_CONTEXT
            assert t["contexts"] == {PARENT_CONTEXT: "target:" + target_name(by_tag[img.parent].id)}
        else:
            assert t["args"]["BASE_IMAGE"] == OS_CONTEXT
    base_boot = doc["target"]["2_9_1-cpu-py3_11-debian12-base"]
    assert base_boot["contexts"] == {OS_CONTEXT: "docker-image://${OS_IMAGE_debian12}"}
    assert doc["variable"]["OS_IMAGE_debian12"] == {"default": "reg/os/debian:12"}
    base_reg = doc["target"]["2_8_0-cpu-py3_11-debian12b-base"]
    assert base_reg["contexts"] == {OS_CONTEXT: "docker-image://debian:12@sha256:" + "e" * 64}


def test_secrets_never_written_and_literals_escaped():
    plan = make_plan()
    doc = bake_document(plan, {i.id: i.id for i in plan.images})
    text = json.dumps(doc)
    assert "u:p@idx" not in text and "u:" not in text
    t = doc["target"]["2_9_1-cpu-py3_11-debian12-runtime"]
    assert t["args"]["PIP_FLAGS"] == "--no-cache-dir $${NOT_A_VAR}"
    assert t["args"]["CREATED"] == '${CREATED != "" ? CREATED : "1970-01-01T00:00:00Z"}'
    assert doc["variable"]["CREATED"] == {"default": ""}


def test_write_bake_materializes_contexts(tmp_path):
    plan = make_plan()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.9.1-cp311-none-any.whl").write_bytes(b"PK")
    plan.images[1].context_dirs = {"wheelhouse": wheels}
    out = tmp_path / "out" / "docker-bake.json"
    doc = write_bake(plan, out)
    assert json.loads(out.read_text()) == doc
    rt = doc["target"]["2_9_1-cpu-py3_11-debian12-runtime"]
    assert rt["context"] == "bake-context/2.9.1-cpu-py3.11-debian12-runtime"
    ctx = out.parent / rt["context"]
    assert (ctx / "Dockerfile").read_text() == plan.images[1].dockerfile
    assert (ctx / "files/imagebuild_tf32.pth").read_bytes() == b"import x\n"
    assert (ctx / "wheelhouse/torch-2.9.1-cp311-none-any.whl").read_bytes() == b"PK"
    write_bake(plan, out)  # idempotent


def test_bake_command_with_only(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from imagebuild.commands.bake import command

    plan = make_plan()
    monkeypatch.setattr("imagebuild.pipeline.loaded.make_plan", lambda *a, **k: plan)
    monkeypatch.setattr("imagebuild.pipeline.loaded.resolve_matrix_path", lambda m: tmp_path / m)
    out = tmp_path / "b.json"
    r = CliRunner().invoke(command, ["--matrix", "cpu.yaml", "-o", str(out), "--only", "2.8.0-*",
                                     "--os-image", "debian12=r/os:12"])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert sorted(doc["target"]) == ["2_8_0-cpu-py3_11-debian12b-base", "2_8_0-cpu-py3_11-debian12b-dev",
                                     "2_8_0-cpu-py3_11-debian12b-runtime"]
    r = CliRunner().invoke(command, ["--matrix", "cpu.yaml", "-o", str(out), "--os-image", "bad"])
    assert r.exit_code != 0


def test_te_runtime_gets_the_cached_wheel_or_a_clear_error(tmp_path, monkeypatch):
    import json as _json

    import pytest

    from imagebuild.errors import UsageError
    from imagebuild.inputs import BuildInputs
    from imagebuild.matrix import find_matrix
    from imagebuild.plan import make_plan

    monkeypatch.setenv("IMAGEBUILD_CACHE_DIR", str(tmp_path / "cache"))
    plan = make_plan(find_matrix("h100.yaml"), BuildInputs(), None)
    runtime = next(i for i in plan.images if i.te_wheel is not None)
    with pytest.raises(UsageError, match="not in the wheel cache") as err:
        write_bake(plan, tmp_path / "out" / "bake.json")
    assert runtime.tag in str(err.value) and "imagebuild build --only" in str(err.value)
    for img in plan.images:  # pretend every key was built once
        if img.te_wheel is not None:
            d = tmp_path / "cache" / "te-wheels" / img.te_wheel.key
            d.mkdir(parents=True, exist_ok=True)
            (d / "transformer_engine_torch-2.10.0-cp312-cp312-linux_x86_64.whl").write_bytes(b"wheel")
            (d / "meta.json").write_text(_json.dumps({"key": img.te_wheel.key}))
    write_bake(plan, tmp_path / "out" / "bake.json")
    wheels = list((tmp_path / "out" / "bake-context" / runtime.id / "te-wheels").glob("*.whl"))
    assert [w.name for w in wheels] == ["transformer_engine_torch-2.10.0-cp312-cp312-linux_x86_64.whl"]


def test_credentialed_extra_index_keeps_the_other_indexes():
    """A user:pass (or token-only) extra index used to drop the whole PIP_EXTRA_INDEX_URL, the torch index with it."""
    plan = make_plan()
    rt = plan.images[1]
    extra = "https://TOKEN@priv.example/simple https://download.pytorch.org/whl/cpu"
    rt.secret_build_args = {"PIP_EXTRA_INDEX_URL": extra}
    rt.build_args["PIP_EXTRA_INDEX_URL"] = extra
    doc = bake_document(plan, {i.id: i.id for i in plan.images})
    assert "TOKEN" not in json.dumps(doc)
    t = doc["target"]["2_9_1-cpu-py3_11-debian12-runtime"]
    assert t["args"]["PIP_EXTRA_INDEX_URL"] == "${PIP_EXTRA_INDEX_URL}"
    assert doc["variable"]["PIP_EXTRA_INDEX_URL"] == {
        "default": "https://priv.example/simple https://download.pytorch.org/whl/cpu"}


def test_compose_form_keeps_host_network_own_labels_and_secrets_by_id(tmp_path):
    import yaml

    plan = make_plan()
    out = tmp_path / "out" / "docker-bake.yml"
    write_bake(plan, out, secrets=True)
    text = out.read_text()
    assert "u:p@idx" not in text
    doc = yaml.safe_load(text)
    runtime = doc["services"]["2_9_1-cpu-py3_11-debian12-runtime"]["build"]
    assert runtime["network"] == "host"
    assert runtime["secrets"] == ["pip_index_url"]
    assert doc["secrets"] == {"pip_index_url": {"environment": "PIP_INDEX_URL"}}
    assert "PIP_INDEX_URL" not in runtime["args"]
    assert runtime["additional_contexts"] == {PARENT_CONTEXT: "target:2_9_1-cpu-py3_11-debian12-base"}
    assert runtime["labels"]["io.imagebuild.inputs-hash"] == plan.images[1].inputs_hash
    assert re.fullmatch(r"\$\{SOURCE_DATE_EPOCH:-\d+\}", runtime["args"]["SOURCE_DATE_EPOCH"])
    assert runtime["args"]["PIP_FLAGS"] == "--no-cache-dir $${NOT_A_VAR}"  # a literal $ is $$ in compose
    base = doc["services"]["2_9_1-cpu-py3_11-debian12-base"]["build"]
    assert base["additional_contexts"][OS_CONTEXT].startswith("docker-image://${OS_IMAGE_debian12:-imagebuild-os/")
