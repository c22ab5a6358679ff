"""`imagebuild test --json`: each row's `image` is the reference the user named; what really ran (the image ID the
matrix run located, verification binding to bytes) is `image_id`. A row spread the result over the reference
before, so under --matrix `image` said the image ID and the tag was lost."""

from __future__ import annotations

from imagebuild.commands.test import _json_row

ID = "sha256:" + "c" * 64


def test_the_tag_stays_image_and_the_id_that_ran_is_image_id():
    row = _json_row("reg/pytorch-cpu:runtime", {"image": ID, "passed": 3, "failed": 0})
    assert row == {"image": "reg/pytorch-cpu:runtime", "image_id": ID, "passed": 3, "failed": 0}


def test_an_image_named_as_it_ran_gets_no_second_key_and_a_recorded_id_is_kept():
    assert _json_row("img:tag", {"image": "img:tag", "passed": 1}) == {"image": "img:tag", "passed": 1}
    other = "sha256:" + "d" * 64
    assert _json_row("img:tag", {"image": ID, "image_id": other})["image_id"] == other
