"""Sizes: Dockerfile steps from image history, size budgets (sizes are parsed by matrix.parse_size and formatted by
imagebuild.units.format_size)."""

from __future__ import annotations

import re

from imagebuild.models import ImageResult
from imagebuild.secrets import redact
from imagebuild.units import format_size

_ARGS_PREFIX = re.compile(r"^\|\d+\s+.*?(?=/bin/sh -c |RUN |COPY |ADD |$)")


def describe_step(created_by: str | None, width: int = 100) -> str:
    """A history `created_by` as the Dockerfile step that made it:
    `|2 BASE_IMAGE=sha256:… /bin/sh -c pip install …` -> `RUN pip install …`;
    `/bin/sh -c #(nop) COPY dir:ab12 in /opt/venv` -> `COPY dir:ab12 in /opt/venv`. Build-arg prefixes are dropped
    (they can carry values), the rest is redacted and shortened."""
    s = (created_by or "").strip()
    s = _ARGS_PREFIX.sub("", s)
    s = s.removesuffix("# buildkit").strip()
    if s.startswith("/bin/sh -c #(nop)"):
        s = s[len("/bin/sh -c #(nop)"):].strip()
    elif s.startswith("/bin/sh -c "):
        s = "RUN " + s[len("/bin/sh -c "):].strip()
    elif s.startswith("RUN /bin/sh -c "):
        s = "RUN " + s[len("RUN /bin/sh -c "):].strip()
    s = redact(re.sub(r"\s+", " ", s))
    if not s:
        s = "(unknown step)"
    return s if len(s) <= width else s[: width - 1] + "…"


def largest_layers(result: ImageResult, n: int = 5) -> list[tuple[int, str]]:
    layers = sorted(result.layers or [], key=lambda layer: layer.get("size") or 0, reverse=True)
    return [(int(layer.get("size") or 0), describe_step(layer.get("created_by"))) for layer in layers[:n]]


def check_size_budget(result: ImageResult, budget_bytes: int | None) -> str | None:
    """None when the image fits (or has no budget/size); else a one-paragraph failure naming the largest layers
    and the Dockerfile steps that made them, for `ImageResult.error`."""
    if not budget_bytes or result.size is None or result.size <= budget_bytes:
        return None
    over = result.size - budget_bytes
    layers = "; ".join(f"{format_size(size)} {step}" for size, step in largest_layers(result, 3))
    text = (f"size {format_size(result.size)} exceeds the {result.flavor} budget {format_size(budget_bytes)} "
            f"by {format_size(over)}")
    return f"{text}; largest layers: {layers}" if layers else text
