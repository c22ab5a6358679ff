"""Size budgets and the Dockerfile steps named in their failures."""

from __future__ import annotations

import pytest

from imagebuild.models import ImageResult
from imagebuild.report import check_size_budget, describe_step, format_size, parse_size


def result(size, layers):
    return ImageResult("r/p:t", "runtime", "h", {}, status="built", size=size, layers=layers)


LAYERS = [
    {"size": 4_300_000_000, "created_by": "|2 BASE_IMAGE=sha256:abc TOKEN=zzz /bin/sh -c pip install --prefix "
                                          "/opt/stage torch==2.9.1"},
    {"size": 120_000_000, "created_by": "/bin/sh -c #(nop) COPY dir:0a1b in /opt/venv "},
    {"size": 2_900_000_000, "created_by": "COPY /opt/stage /opt/venv # buildkit"},
    {"size": 0, "created_by": "/bin/sh -c #(nop)  ENV PATH=/opt/venv/bin:/usr/bin"},
]


def test_within_budget():
    assert check_size_budget(result(7_000_000_000, LAYERS), parse_size("7.5GB")) is None
    assert check_size_budget(result(9_000_000_000, LAYERS), None) is None


def test_over_budget_names_largest_layers_with_steps():
    msg = check_size_budget(result(8_100_000_000, LAYERS), parse_size("7.5GB"))
    assert msg.startswith("size 8.10 GB exceeds the runtime budget 7.50 GB by 600.00 MB")
    assert "4.30 GB RUN pip install --prefix /opt/stage torch==2.9.1" in msg
    assert msg.index("4.30 GB") < msg.index("2.90 GB COPY /opt/stage /opt/venv") < msg.index("120.00 MB COPY")
    assert "TOKEN" not in msg and "zzz" not in msg  # build-arg prefixes never reach messages


@pytest.mark.parametrize("text,n", [("7.5GB", 7_500_000_000), ("800MB", 800_000_000), ("2GiB", 2 * 2**30),
                                    ("1024", 1024), (512, 512), ("1.5 gb", 1_500_000_000)])
def test_parse_size(text, n):
    assert parse_size(text) == n


def test_parse_size_rejects():
    with pytest.raises(ValueError):
        parse_size("lots")


def test_format_size():
    assert format_size(None) == "–" and format_size(999) == "999 B" and format_size(1_500_000) == "1.50 MB"


def test_describe_step_truncates():
    s = describe_step("/bin/sh -c " + "x" * 300, width=50)
    assert len(s) == 50 and s.startswith("RUN xxx") and s.endswith("…")
    assert describe_step(None) == "(unknown step)"
