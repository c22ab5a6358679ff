"""The image reference grammar: valid references parse; each kind of invalid one says what is wrong."""

import pytest

from imagebuild.oci import ReferenceSyntaxError, check_registry, parse_reference

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    "text, domain, path, tag, digest",
    [
        ("ubuntu", None, "ubuntu", None, None),
        ("ubuntu:24.04", None, "ubuntu", "24.04", None),
        (f"ubuntu:24.04@{DIGEST}", None, "ubuntu", "24.04", DIGEST),
        (f"ubuntu@{DIGEST}", None, "ubuntu", None, DIGEST),
        ("nvidia/cuda:12.8.1-base-ubuntu24.04", None, "nvidia/cuda", "12.8.1-base-ubuntu24.04", None),
        ("registry.example.internal:5000/ml/pytorch:2.9.1-cuda12.8", "registry.example.internal:5000", "ml/pytorch",
         "2.9.1-cuda12.8", None),
        ("localhost:5000/a__b/c-d.e", "localhost:5000", "a__b/c-d.e", None, None),
        ("[::1]:5000/x:y", "[::1]:5000", "x", "y", None),
    ],
)
def test_valid(text, domain, path, tag, digest):
    ref = parse_reference(text)
    assert (ref.domain, ref.path, ref.tag, ref.digest) == (domain, path, tag, digest)
    assert str(ref) == text


@pytest.mark.parametrize(
    "text, reason",
    [
        ("Ubuntu:24.04", "must be lowercase"),
        ("ubuntu:24.04@sha256:abc", "64 lowercase hex"),
        ("ubuntu@md5:" + "a" * 32, "sha256"),
        ("ubuntu:-bad", "tag '-bad' is invalid"),
        ("ubuntu:", "tag '' is invalid"),
        ("reg.io:99999/x", "port '99999'"),
        ("reg.io:/x", "port ''"),
        ("a//b", "empty component"),
        ("a/b/", "empty component"),
        ("has space", "spaces"),
        ("-lead.io/x", "host"),
        ("x" * 256, "longer than 255"),
        ("", "empty"),
    ],
)
def test_invalid(text, reason):
    with pytest.raises(ReferenceSyntaxError, match=None) as err:
        parse_reference(text)
    assert reason in str(err.value)


@pytest.mark.parametrize("text", ["registry.example.internal:5000/ml", "localhost:5000", "ghcr.io/org/sub", "ml"])
def test_registry_valid(text):
    assert check_registry(text + "/") == text


@pytest.mark.parametrize("text, reason", [("ghcr.io/org:tag", "tag"), (f"ghcr.io/org@{DIGEST}", "digest"),
                                          ("reg:abc", "port"), ("reg.io/ML", "lowercase")])
def test_registry_invalid(text, reason):
    with pytest.raises(ReferenceSyntaxError) as err:
        check_registry(text)
    assert reason in str(err.value)
