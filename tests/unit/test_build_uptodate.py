"""Up-to-date look-up: never adopt an untagged builder stage that inherited a parent's labels; a root image stands on
its OS image by its base-id label, a child on its parent by its layers (no label names a child's parent)."""

from __future__ import annotations

import types

from _fake_engine import FakeEngine

from imagebuild.builder.uptodate import BASE_LABEL, INPUTS_LABEL, find_up_to_date, local_image


def _plan(parent=None):
    return types.SimpleNamespace(tag="reg/pytorch:1-base" if parent is None else "reg/pytorch:1-runtime",
                                 inputs_hash="sha256:aaa", parent=parent)


LABELS = {INPUTS_LABEL: "sha256:aaa", BASE_LABEL: "sha256:os"}
BASE = ["sha256:" + "1" * 64]
ON_BASE = {"RootFS": {"Layers": [*BASE, "sha256:" + "2" * 64]}}


def _engine() -> FakeEngine:
    engine = FakeEngine()
    engine.add_image("reg/pytorch:1-base", {}, image_id="sha256:base", RootFS={"Layers": BASE})
    return engine


def test_untagged_intermediate_with_inherited_labels_is_not_reused():
    engine = FakeEngine()
    engine.add_image(None, LABELS, image_id="sha256:pipstage")
    engine.add_image(None, LABELS, image_id="sha256:dangling")
    assert find_up_to_date(engine, _plan(), "sha256:os") is None
    assert engine.tag_calls == []


def test_tagged_image_with_same_inputs_is_retagged():
    engine = FakeEngine()
    engine.add_image("other/pytorch:1-base", LABELS, image_id="sha256:final")
    assert find_up_to_date(engine, _plan(), "sha256:os") == "sha256:final"
    assert engine.tag_calls == [("sha256:final", "reg/pytorch", "1-base")]
    assert engine.tags["reg/pytorch:1-base"] == "sha256:final"


def test_the_plans_tag_on_another_base_is_not_up_to_date_but_holds_the_inputs():
    engine = FakeEngine()
    engine.add_image("reg/pytorch:1-base", {**LABELS, BASE_LABEL: "sha256:old-os"}, image_id="sha256:stale")
    assert find_up_to_date(engine, _plan(), "sha256:os") is None
    assert local_image(engine, _plan()) == ("sha256:stale", "reg/pytorch:1-base")  # what `locate` asks
    assert local_image(engine, _plan(), first=["sha256:stale"]) == ("sha256:stale", None)


def test_a_child_stands_on_its_parent_by_its_layers_whatever_a_label_says():
    """A child carries no parent ID (an old image's base-id label is not read): the layers decide."""
    engine = _engine()
    child = _plan(parent="reg/pytorch:1-base")
    engine.add_image(child.tag, {INPUTS_LABEL: "sha256:aaa", BASE_LABEL: "sha256:other"}, image_id="sha256:rt",
                     **ON_BASE)
    assert find_up_to_date(engine, child, "sha256:base") == "sha256:rt"
    engine.add_image(child.tag, {INPUTS_LABEL: "sha256:aaa"}, image_id="sha256:elsewhere",
                     RootFS={"Layers": ["sha256:" + "3" * 64, "sha256:" + "2" * 64]})  # built on another parent
    assert find_up_to_date(engine, child, "sha256:base") is None
    engine.images_by_id["sha256:base"]["RootFS"] = {"Layers": []}  # a parent without layers proves nothing
    engine.tags[child.tag] = "sha256:rt"
    assert find_up_to_date(engine, child, "sha256:base") is None
