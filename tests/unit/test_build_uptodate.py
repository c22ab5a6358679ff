"""Up-to-date look-up: never adopt an untagged builder stage that inherited a parent's labels."""

from __future__ import annotations

import types

import docker

from imagebuild.builder.uptodate import BASE_LABEL, INPUTS_LABEL, find_up_to_date


class FakeAPI:
    def __init__(self, images):
        self._images = images
        self.tagged = []

    def inspect_image(self, ref):
        raise docker.errors.ImageNotFound(ref)

    def images(self, filters=None):
        return self._images

    def tag(self, image_id, repo, tag):
        self.tagged.append((image_id, repo, tag))


def _plan():
    return types.SimpleNamespace(tag="reg/pytorch:1-base", inputs_hash="sha256:aaa")


LABELS = {INPUTS_LABEL: "sha256:aaa", BASE_LABEL: "sha256:os"}


def test_untagged_intermediate_with_inherited_labels_is_not_reused():
    api = FakeAPI([{"Id": "sha256:pipstage", "RepoTags": None, "Labels": LABELS},
                   {"Id": "sha256:dangling", "RepoTags": ["<none>:<none>"], "Labels": LABELS}])
    client = types.SimpleNamespace(api=api)
    assert find_up_to_date(client, _plan(), "sha256:os") is None
    assert api.tagged == []


def test_tagged_image_with_same_inputs_is_retagged():
    api = FakeAPI([{"Id": "sha256:final", "RepoTags": ["other/pytorch:1-base"], "Labels": LABELS}])
    client = types.SimpleNamespace(api=api)
    assert find_up_to_date(client, _plan(), "sha256:os") == "sha256:final"
    assert api.tagged == [("sha256:final", "reg/pytorch", "1-base")]
