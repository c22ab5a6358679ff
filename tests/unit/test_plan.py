"""Plan assembly: tags, parents, aliases, hash propagation, selection, JSON shapes."""

from __future__ import annotations

import dataclasses
import json

import pytest

import imagebuild.render as render_pkg
from imagebuild.inputs import BuildInputs
from imagebuild.matrix import find_matrix
from imagebuild.plan import make_plan, plan_from_variants
from imagebuild.plan.assemble import select
from imagebuild.plan.output import github_matrix, plan_json
from imagebuild.resolve import resolve_file


@pytest.fixture(scope="module")
def h100_variants():
    _, variants = resolve_file("h100.yaml")
    return variants


def test_every_shipped_matrix_plans(tmp_path):
    for name in ("cpu.yaml", "h100.yaml", "a100.yaml"):
        plan = make_plan(find_matrix(name), BuildInputs())
        assert plan.images, name
        tags = [i.tag for i in plan.images]
        assert len(tags) == len(set(tags)), f"{name}: duplicate tags"
        seen = set()
        for image in plan.images:  # dependency order: a parent is always planned before its children
            assert image.parent is None or image.parent in seen
            seen.add(image.tag)


def test_tag_scheme(h100_variants):
    plan = plan_from_variants(h100_variants, BuildInputs())
    tags = {i.tag for i in plan.images}
    assert "registry.example.internal:5000/ml/pytorch:2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-runtime" in tags
    cpu = make_plan(find_matrix("cpu.yaml"), BuildInputs(), registry="")
    assert cpu.images[0].tag == "pytorch-cpu:2.13.0-cpu-py3.11-debian12-base"


def test_parents_chain(h100_variants):
    plan = plan_from_variants(h100_variants, BuildInputs())
    by_tag = plan.by_tag()
    for image in plan.images:
        expected = {"base": None, "runtime": "base", "dev": "runtime"}[image.flavor]
        if expected is None:
            assert image.parent is None
        else:
            parent = by_tag[image.parent]
            assert parent.flavor == expected and parent.variant.key == image.variant.key


def test_deterministic(h100_variants):
    a = plan_from_variants(h100_variants, BuildInputs())
    b = plan_from_variants(h100_variants, BuildInputs())
    assert [(i.tag, i.inputs_hash, i.dockerfile) for i in a.images] == [
        (i.tag, i.inputs_hash, i.dockerfile) for i in b.images
    ]


def test_runtime_template_change_changes_runtime_and_dev_not_base(h100_variants, monkeypatch):
    before = {i.id: i.inputs_hash for i in plan_from_variants(h100_variants, BuildInputs()).images}
    real = render_pkg.render_image

    def patched(variant, flavor, inputs=None, locked=None):
        out = real(variant, flavor, inputs, locked)
        if flavor == "runtime":
            out = dataclasses.replace(out, dockerfile=out.dockerfile + "# template edit\n")
        return out

    monkeypatch.setattr(render_pkg, "render_image", patched)
    after = {i.id: i.inputs_hash for i in plan_from_variants(h100_variants, BuildInputs()).images}
    for image_id, digest in before.items():
        if image_id.endswith("-base"):
            assert after[image_id] == digest, image_id
        else:
            assert after[image_id] != digest, image_id


def test_ca_cert_changes_every_hash(tmp_path, h100_variants):
    ca = tmp_path / "corp.crt"
    ca.write_text(open("/etc/ssl/certs/ca-certificates.crt").read().split("-----END CERTIFICATE-----")[0]
                  + "-----END CERTIFICATE-----\n")
    a = {i.id: i.inputs_hash for i in plan_from_variants(h100_variants, BuildInputs()).images}
    b = {i.id: i.inputs_hash for i in plan_from_variants(h100_variants, BuildInputs(ca_certs=(ca,))).images}
    assert all(a[k] != b[k] for k in a)


def test_credentials_never_in_hashed_inputs(h100_variants):
    inputs = BuildInputs(pip_index_url="https://bob:s3cretpw@pypi.corp.example/simple")
    plan = plan_from_variants(h100_variants, inputs)
    for image in plan.images:
        assert "s3cretpw" not in image.dockerfile
        assert "s3cretpw" not in json.dumps(image.build_args)
        assert "s3cretpw" not in json.dumps(image.labels)


def test_aliases_follow_newest_patch(h100_variants):
    plan = plan_from_variants(h100_variants, BuildInputs())
    alias_owner = {a: i.tag for i in plan.images for a in i.aliases}
    assert alias_owner["registry.example.internal:5000/ml/pytorch:2.9-cuda12.8-runtime"].endswith(
        "2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-runtime")
    assert alias_owner["registry.example.internal:5000/ml/pytorch:2.7-cuda12.8-dev"].endswith(
        "2.7.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-dev")


def test_registry_override_is_checked(h100_variants):
    from imagebuild.errors import UsageError

    with pytest.raises(UsageError, match=r"--registry 'reg.io/ML'.*lowercase"):
        plan_from_variants(h100_variants, BuildInputs(), registry="reg.io/ML")


def test_select_brings_parents(h100_variants):
    plan = plan_from_variants(h100_variants, BuildInputs())
    chosen = select(plan, "*2.9.1-cuda13.0*-dev")
    assert [i.flavor for i in chosen] == ["base", "runtime", "dev"]
    assert select(plan, "nothing-matches") == []


def test_plan_json_shape():
    plan = make_plan(find_matrix("h100.yaml"), BuildInputs())
    rows = json.loads(plan_json(plan))
    assert len(rows) == 9
    for row in rows:
        assert {"tag", "flavor", "parent", "versions", "inputs_hash", "dockerfile"} <= row.keys()
        assert {"torch", "cuda", "cudnn", "nccl", "python", "os", "transformer_engine"} <= row["versions"].keys()
        assert row["dockerfile"].endswith("/Dockerfile")
    runtime = next(r for r in rows if r["tag"].endswith("2.9.1-cuda12.8-cudnn9-py3.12-ubuntu24.04-runtime"))
    assert runtime["versions"]["cudnn"] == "9.10.2.21" and runtime["versions"]["nccl"] == "2.27.5"


def test_github_matrix_one_job_per_variant():
    plan = make_plan(find_matrix("h100.yaml"), BuildInputs())
    doc = json.loads(github_matrix(plan))
    assert len(doc["include"]) == 3
    assert {row["only"] for row in doc["include"]} == {f"{i.variant.key}-*" for i in plan.images}


def test_variants_share_an_identical_base(h100_variants):
    """torch 2.7.1 and 2.9.1 on CUDA 12.8/ubuntu24.04/py3.12 stand on the same base: one inputs hash, built once."""
    plan = plan_from_variants(h100_variants, BuildInputs())
    bases = {i.variant.key: i.inputs_hash for i in plan.images if i.flavor == "base"}
    assert bases["2.7.1-cuda12.8-py3.12-ubuntu24.04"] == bases["2.9.1-cuda12.8-py3.12-ubuntu24.04"]
    assert bases["2.9.1-cuda13.0-py3.12-ubuntu24.04"] != bases["2.9.1-cuda12.8-py3.12-ubuntu24.04"]
    runtimes = {i.inputs_hash for i in plan.images if i.flavor == "runtime"}
    assert len(runtimes) == 3


def test_a_damaged_digest_cache_is_no_cache(tmp_path, monkeypatch):
    import hashlib

    from imagebuild.plan import hashing

    monkeypatch.setenv("IMAGEBUILD_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    wheel = tmp_path / "w.whl"
    wheel.write_bytes(b"PK wheel")
    for damaged in ("[1, 2]", "{", "[" * 100_000):
        (tmp_path / "cache" / "file-digests.json").write_text(damaged)
        monkeypatch.setattr(hashing, "_CACHE", None)
        assert hashing.file_digest(wheel) == hashlib.sha256(b"PK wheel").hexdigest()
