"""The catalog as Markdown (a registry's README: a short header, one table, the notes) and as JSON."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from imagebuild import __version__
from imagebuild.catalog.collect import Entry
from imagebuild.models import describe_audit, describe_coverage
from imagebuild.oci import Reference
from imagebuild.oci.pyxis import pyxis_image
from imagebuild.units import format_size

COLUMNS = ("tag", "flavor", "torch", "CUDA", "cuDNN", "NCCL", "Python", "OS", "TE", "GPUs", "GPU code", "driver ≥",
           "audit", "compressed", "uncompressed", "digest", "runs on", "smoke p/f/s", "tested on", "created", "pyxis")
_ALIGN = {"compressed": "---:", "uncompressed": "---:"}


@dataclass(frozen=True)
class Header:
    matrix: str  # the matrix file as given
    registry: str  # where the tags were looked up (the registry prefix of the plan's tags)
    repositories: tuple[str, ...]
    generated_at: str  # UTC, ISO 8601
    record: str  # the matrix's record (.imagebuild/<matrix>.state.json) smoke results and unpacked sizes come from


_MARKDOWN_PUNCT = re.compile(r"([\\`*_\[\]|#!~])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")


def escape_text(value: object) -> str:
    """Registry text (labels, platforms) as literal Markdown inline text: HTML's `&`, `<`, `>` as entities (no raw
    HTML), Markdown's punctuation backslash-escaped (no code span, link, emphasis, or `|` that would split a table
    cell), line breaks and other control characters as one space (no new row or line)."""
    text = _CONTROL.sub(" ", str(value))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_PUNCT.sub(r"\\\1", text)


def _cell(value: Any) -> str:
    return "–" if value in (None, "") else escape_text(value)


def _smoke(entry: Entry) -> tuple[str, str]:
    if not entry.pushed:
        return "–", "–"
    if entry.smoke is None:
        return ("not tested" if entry.recorded else "no record"), "–"
    s = entry.smoke
    mark = "❌" if s["failed"] else "✅"
    return f"{mark} {s['passed']}/{s['failed']}/{s['skipped']}", _cell(s["ran_on"])


def pinned(entry: Entry) -> str:
    """The pyxis image of a row: REPO@DIGEST of what was read (the bytes the row describes), the tag when not
    pushed."""
    if entry.pushed and entry.digest:
        return pyxis_image(f"{Reference.parse(entry.reference).name}@{entry.digest}")
    return pyxis_image(entry.reference)


def _per_platform(entry: Entry, say: Any) -> str:
    """`say(facts)` of each platform image (prefixed with its platform when the tag names several)."""
    if not entry.pushed:
        return "not checked (not pushed)"
    if not entry.platforms:
        return "not checked (no local record of this image)"
    texts = {p: say(f) for p, f in entry.platforms.items()}
    if len(texts) == 1:
        return escape_text(next(iter(texts.values())))
    return "<br>".join(f"{escape_text(p)}: {escape_text(t)}" for p, t in texts.items())


def _coverage_cell(entry: Entry) -> str:
    return _per_platform(entry, lambda f: describe_coverage(f.get("coverage") or {}, entry.versions.get("gpus")))


def _audit_cell(entry: Entry) -> str:
    return _per_platform(entry, lambda f: describe_audit(f.get("audit"), f.get("config_digest")))


def _driver(entry: Entry) -> str:
    if entry.versions.get("min_driver"):
        return _cell(entry.versions["min_driver"])
    return "not needed (no target GPUs)" if not entry.versions.get("gpus") else "not labelled"


def _row(entry: Entry) -> list[str]:
    v = entry.versions
    tag = f"↳ `{entry.tag}`" if entry.alias_of else f"`{entry.tag}`"
    if entry.pushed:
        digest = f"`{entry.digest}`" + (f" ({escape_text(entry.platform)})" if entry.platform else "")
        sizes = [format_size(entry.compressed), format_size(entry.uncompressed)]
    else:
        digest, sizes = "**not pushed**", ["–", "–"]
    smoke, where = _smoke(entry)
    built = (entry.created or "")[:10]
    return [tag, "alias" if entry.alias_of else _cell(entry.flavor), *(_cell(v.get(k)) for k in
            ("torch", "cuda", "cudnn", "nccl", "python", "os", "transformer_engine")),
            _cell((v.get("gpus") or "").replace(",", ", ")), _coverage_cell(entry), _driver(entry), _audit_cell(entry),
            *sizes, digest,
            _cell(entry.runs_on if entry.pushed else None), smoke, where,
            _cell(built), f"`{pinned(entry)}`"]


def render_markdown(entries: list[Entry], header: Header) -> str:
    tags = sum(1 for e in entries if not e.alias_of)
    aliases = len(entries) - tags
    missing = sum(1 for e in entries if not e.pushed)
    repos = ", ".join(f"`{r}`" for r in header.repositories)
    lines = [
        f"# Images in `{header.registry}`", "",
        f"Matrix `{header.matrix}` · registry `{header.registry}` · generated {header.generated_at} by "
        f"`imagebuild catalog` {__version__}", "",
        f"Repository: {repos}. Pull a row with `docker pull <repository>:<tag>`, or pin it with "
        "`<repository>@<digest>`. A ↳ row is a moving alias of the tag above it.", "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join(_ALIGN.get(c, "---") for c in COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(_row(e)) + " |" for e in entries]
    lines += [
        "",
        f"{tags} tags, {aliases} aliases; {missing} not pushed." if missing else f"{tags} tags, {aliases} aliases.",
        "",
        "- Versions, flavor, digest, compressed size and `created` are read from the registry (manifests and image "
        "configs with their `io.imagebuild.*` / OCI labels, through the registry API; no image was pulled). Rows "
        "**not pushed** show what the plan would publish.",
        "- created: the image's `org.opencontainers.image.created` label: its source date (the OS archive's date, so "
        "rebuilds of the same inputs reproduce the same image), or the build time when built with `--created now`.",
        "- GPUs: the image's target GPUs with their compute capabilities (its `io.imagebuild.gpus` label: the "
        "matrix's `gpus:`, else its family's default); driver ≥: the oldest NVIDIA driver that runs its CUDA "
        "(`io.imagebuild.min-driver`), which `imagebuild run` and `slurm` compare with the node's driver; \"not "
        "needed\" for an image with no target GPUs.",
        "- GPU code: per platform image, which target GPUs its CUDA libraries run natively (SASS) and which only "
        "through PTX JIT (slower first start, JIT cache) or not at all, from the coverage check of its latest "
        "`imagebuild test` in the record (matched on its config digest); \"not checked\" where it was not read: "
        "a CPU image, no CUDA library, no test run, no local record.",
        "- audit: per platform image, the last `imagebuild audit -m` of exactly that image in the record: security "
        "fixes (the release's security suite) and Python advisories (OSV/PyPI) found; \"not checked\" where no "
        "audit of that image ID was kept or a source could not be consulted (never counted as clean).",
        "- compressed: the sum of the manifest's layer sizes (what a pull downloads).",
        "- runs on: what a node's runtime needs to pull the tag, from its layers' media types: zstd layers (what "
        "`imagebuild push` writes by default) need Docker ≥ 23, containerd ≥ 1.5 or enroot ≥ 3.5; for older "
        "runtimes push with `--compression gzip`.",
        f"- uncompressed, smoke and tested on: from the matrix's record `{header.record}`, matched on the image's "
        "config digest (its image ID), so a record of another build under the same tag never counts; the size is the "
        "engine's size of that image. – / no record: that record does not know the image (a registry cannot tell "
        "unpacked sizes without pulling the layers). smoke p/f/s: checks passed/failed/skipped in the latest "
        "`imagebuild test` of that image; tested on: CPU host (every GPU check skipped) or the GPU model(s).",
        "- pyxis: the row's digest as Slurm's pyxis plugin (enroot) takes it: `srun --container-image=<pyxis> …` "
        "starts exactly the image the row describes, not whatever the tag names later (rows not pushed: the tag); "
        "the registry is split off with `#`. For a cluster-wide copy: `imagebuild export … -o image.sqsh`.",
    ]
    notes = [f"- `{e.tag}`: {escape_text(note)}" for e in entries for note in e.notes]
    if notes:
        lines += ["", "Notes:", "", *notes]
    return "\n".join(lines) + "\n"


def render_json(entries: list[Entry], header: Header) -> str:
    doc = {
        "matrix": header.matrix, "registry": header.registry, "repositories": list(header.repositories),
        "generated_at": header.generated_at, "generator": f"imagebuild {__version__}", "record": header.record,
        "entries": [{**e.as_dict(), "pyxis": pinned(e)} for e in entries],
    }
    return json.dumps(doc, indent=2) + "\n"
