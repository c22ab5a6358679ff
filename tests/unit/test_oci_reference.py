"""The image-reference type: normalisation (Docker Hub, `library/`), the helpers, and the alias forms."""

from __future__ import annotations

import dataclasses

import pytest

from imagebuild.oci import DOCKER_HUB, Reference, ReferenceSyntaxError, alias_reference

DIGEST = "sha256:" + "cd" * 32


@pytest.mark.parametrize(
    "text, registry, repository, normalized",
    [
        ("ubuntu", DOCKER_HUB, "library/ubuntu", "docker.io/library/ubuntu"),
        ("ubuntu:24.04", DOCKER_HUB, "library/ubuntu", "docker.io/library/ubuntu:24.04"),
        ("nvidia/cuda:12.8.1-base-ubuntu24.04", DOCKER_HUB, "nvidia/cuda",
         "docker.io/nvidia/cuda:12.8.1-base-ubuntu24.04"),
        ("docker.io/ubuntu:24.04", DOCKER_HUB, "library/ubuntu", "docker.io/library/ubuntu:24.04"),
        ("docker.io/library/ubuntu", DOCKER_HUB, "library/ubuntu", "docker.io/library/ubuntu"),
        ("index.docker.io/org/img:1", DOCKER_HUB, "org/img", "docker.io/org/img:1"),
        ("localhost/pytorch:1", "localhost", "pytorch", "localhost/pytorch:1"),
        ("127.0.0.1:5000/ml/pytorch:2.9-cpu", "127.0.0.1:5000", "ml/pytorch", "127.0.0.1:5000/ml/pytorch:2.9-cpu"),
        (f"ghcr.io/org/img@{DIGEST}", "ghcr.io", "org/img", f"ghcr.io/org/img@{DIGEST}"),
        ("[::1]:5000/x:y", "[::1]:5000", "x", "[::1]:5000/x:y"),
    ],
)
def test_normalisation(text, registry, repository, normalized):
    ref = Reference.parse(text)
    assert (ref.registry, ref.repository) == (registry, repository)
    assert str(ref.normalized()) == normalized
    assert str(ref) == text  # formatting gives back what was written: Dockerfiles and tags stay as they are
    assert Reference.parse(str(ref.normalized())).normalized() == ref.normalized()  # idempotent


def test_name_is_the_repository_as_written():
    assert Reference.parse("ubuntu:24.04").name == "ubuntu"
    assert Reference.parse(f"reg.io:5000/a/b:t@{DIGEST}").name == "reg.io:5000/a/b"


def test_the_type_is_frozen_and_compares_by_value():
    ref = Reference.parse("ubuntu:24.04")
    assert ref == Reference(None, "ubuntu", "24.04")
    assert hash(ref) == hash(Reference(None, "ubuntu", "24.04"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ref.tag = "22.04"  # type: ignore[misc]


def test_with_tag():
    ref = Reference.parse(f"127.0.0.1:5000/ml/pytorch:2.9.1-cpu@{DIGEST}")
    moved = ref.with_tag("2.9-cpu-runtime")
    assert str(moved) == "127.0.0.1:5000/ml/pytorch:2.9-cpu-runtime"  # the digest pinned the old tag: dropped
    assert str(ref) == f"127.0.0.1:5000/ml/pytorch:2.9.1-cpu@{DIGEST}"  # unchanged
    with pytest.raises(ReferenceSyntaxError, match="tag '-x' is invalid"):
        ref.with_tag("-x")


def test_with_registry():
    ref = Reference.parse("ubuntu:24.04")
    mirrored = ref.with_registry("mirror.example.internal:5000")
    assert str(mirrored) == "mirror.example.internal:5000/ubuntu:24.04"
    assert (mirrored.registry, mirrored.repository) == ("mirror.example.internal:5000", "ubuntu")
    assert mirrored.with_registry(None) == ref
    with pytest.raises(ReferenceSyntaxError, match="port"):
        ref.with_registry("reg.io:99999")


@pytest.mark.parametrize(
    "repository, alias, full",
    [
        # the plan writes aliases as full references: kept as they are
        ("reg:5000/ml/pytorch", "reg:5000/ml/pytorch:2.9-cuda12.8-runtime", "reg:5000/ml/pytorch:2.9-cuda12.8-runtime"),
        ("reg:5000/ml/pytorch", "other.io/x:2.9-cpu-base", "other.io/x:2.9-cpu-base"),
        ("ibtest", "ibtest:2.13-cpu-base", "ibtest:2.13-cpu-base"),
        # a short alias is a tag of the image's own repository (a registry port is not a tag)
        ("ibtest", "short-alias", "ibtest:short-alias"),
        ("reg:5000/ml/pytorch", "2.9-cpu-dev", "reg:5000/ml/pytorch:2.9-cpu-dev"),
    ],
)
def test_alias_forms(repository, alias, full):
    assert alias_reference(repository, alias) == full
    assert Reference.parse(full).tag == full.rsplit(":", 1)[1]


def test_plan_references_are_tag_then_aliases_without_repeats():
    from imagebuild.plan.tags import references

    class Image:  # the two fields references() reads
        tag = "reg:5000/ml/pytorch:2.9.1-cpu-py3.11-debian12-runtime"
        repository = "reg:5000/ml/pytorch"
        aliases = ("reg:5000/ml/pytorch:2.9-cpu-runtime", "2.9-cpu-runtime", "latest")

    assert references(Image()) == [Image.tag, "reg:5000/ml/pytorch:2.9-cpu-runtime", "reg:5000/ml/pytorch:latest"]
