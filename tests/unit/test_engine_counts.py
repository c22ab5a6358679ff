"""scripts/engine_counts.py: the figures make test prints last, from the events recorded as they happened."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("engine_counts", Path(__file__).parents[2] / "scripts" / "engine_counts.py")
ec = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ec)


def _image(action: str, image_id: str, **labels: str) -> dict:
    return {"Type": "image", "Action": action, "Actor": {"ID": image_id, "Attributes": labels}}


def _container(name: str, image: str) -> dict:
    return {"Type": "container", "Action": "create", "Actor": {"ID": name, "Attributes": {"name": name, "image": image}}}


EVENTS = [
    _image("load", "sha256:os", **{ec.BOOTSTRAP: "h"}),  # a bootstrapped OS image
    _image("load", "sha256:os-again", **{ec.BOOTSTRAP: "h", ec.FLAVOR: "base"}),  # a built base: not a bootstrap
    _image("tag", "sha256:b", **{ec.FLAVOR: "base"}),
    _image("tag", "sha256:b", **{ec.FLAVOR: "base"}),  # the same ID tagged again counts once
    _image("tag", "sha256:r", **{ec.FLAVOR: "runtime"}),
    _container("ib-smoke-rt-abc123", "rt"),
    _container("ib-smoke-rt-abc123-uid", "rt"),  # its side container: the same suite
    _container("ib-smoke-rt-def456", "rt"),
    _container("other", "rt"),
]


def test_counts_read_from_a_recording(tmp_path):
    path = tmp_path / "c.jsonl"
    lines = [json.dumps({"recording": "unix:///x.sock", "since": 1.0})] + [json.dumps(e) for e in EVENTS]
    path.write_text("\n".join(lines) + '\n{"Type": "conta')  # the last line cut short by the stopping signal
    figures = ec.count(ec.read_recording(path))
    assert figures == {"bootstraps": 1, "images": 3, "by_flavor": {"base": 2, "runtime": 1}, "smoke_suites": 2,
                       "smoke_images": 1}
    assert ec.line("classic", figures) == ("classic: 1 OS bootstraps, 3 imagebuild images built or loaded (base 2, "
                                           "runtime 1), 2 smoke suites run on 1 images")


@pytest.mark.parametrize("text, why", [(None, "no recording"), ("", "never opened"),
                                       ('{"Type": "image"}\n', "never opened"),
                                       ('{"recording": "h"}\nnot json\n{"Type": "image"}\n', ":2: not an event")])
def test_a_missing_or_damaged_recording_is_one_error_never_zero(tmp_path, capsys, text, why):
    path = tmp_path / "c.jsonl"
    if text is not None:
        path.write_text(text)
    assert ec.main(["count", f"classic={path}"]) == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and out.err.startswith("error: engine_counts: classic: ")
    assert why in out.err
