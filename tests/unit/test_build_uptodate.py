"""Up-to-date look-up: never adopt an untagged builder stage that inherited a parent's labels."""

from __future__ import annotations

import types

from _fake_engine import FakeEngine

from imagebuild.builder.uptodate import BASE_LABEL, INPUTS_LABEL, find_up_to_date


def _plan():
    return types.SimpleNamespace(tag="reg/pytorch:1-base", inputs_hash="sha256:aaa")


LABELS = {INPUTS_LABEL: "sha256:aaa", BASE_LABEL: "sha256:os"}


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
    from imagebuild.builder.uptodate import local_image

    engine = FakeEngine()
    engine.add_image("reg/pytorch:1-base", {**LABELS, BASE_LABEL: "sha256:old-os"}, image_id="sha256:stale")
    assert find_up_to_date(engine, _plan(), "sha256:os") is None
    assert local_image(engine, _plan()) == ("sha256:stale", "reg/pytorch:1-base")  # what `locate` asks
    assert local_image(engine, _plan(), first=["sha256:stale"]) == ("sha256:stale", None)
