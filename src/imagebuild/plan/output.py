"""Plan as a table, as JSON, and as a GitHub Actions `strategy.matrix`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from imagebuild.models import DEFAULT_PLATFORM, Plan
from imagebuild.render.hardware import GPUS_LABEL, MIN_DRIVER_LABEL

if TYPE_CHECKING:
    from rich.console import Console


class Staleness(Protocol):
    """What plan --security shows of one image (audit/stale.py's Staleness; plan does not import the audit)."""

    @property
    def index(self) -> str: ...

    @property
    def why(self) -> str: ...

    @property
    def fixes(self) -> tuple[Any, ...]: ...

    @property
    def summary(self) -> str: ...

    def changes(self, limit: int | None = None) -> str: ...

    def stale_json(self) -> dict[str, Any] | bool | None: ...

    def as_json(self) -> dict[str, Any]: ...


def plan_rows(plan: Plan, states: dict[str, dict[str, Any]] | None = None,
              layers: dict[str, list[dict[str, Any]]] | None = None,
              security: Mapping[str, Staleness] | None = None) -> list[dict[str, Any]]:
    """`states`: plan id -> what the matrix's record says of that image (pipeline.located.record_states, as_dict);
    `layers`: plan id -> its environment layers (pipeline.layers.plan_layers: size None = not built);
    `security` (plan --security): plan id -> its staleness against the security suite (audit/stale.py): `stale` is
    {security_fixes, index, fixes} when stale, false when checked fresh, null when not checked."""
    rows = []
    for image in plan.images:
        v = image.variant
        rows.append(
            {
                "id": image.id,
                "tag": image.tag,
                "aliases": list(image.aliases),
                "flavor": image.flavor,
                "platform": v.platform,
                "parent": image.parent,
                "versions": {
                    "torch": v.versions.torch,
                    "cuda": v.versions.cuda,
                    "cudnn": v.versions.cudnn,
                    "nccl": v.versions.nccl,
                    "python": v.versions.python,
                    "os": v.versions.os,
                    "transformer_engine": v.versions.transformer_engine,
                    "torchvision": v.versions.torchvision,
                    "torchaudio": v.versions.torchaudio,
                    "triton": v.versions.triton,
                },
                "chosen": dict(v.chosen),
                "base": {"kind": v.base.kind, "ref": v.base.ref},
                "gpu_archs": list(v.gpu_archs),
                "gpus": image.labels.get(GPUS_LABEL) or None,  # what the image is labelled for (render/hardware.py)
                "min_driver": image.labels.get(MIN_DRIVER_LABEL) or None,
                "inputs_hash": image.inputs_hash,
                "dockerfile": str(image.dockerfile_path) if image.dockerfile_path else None,
                **({"state": (states or {}).get(image.id)} if states is not None else {}),
                **({"layers": layers[image.id]} if layers and image.id in layers else {}),
                **({"stale": security[image.id].stale_json(), "security": security[image.id].as_json()}
                   if security is not None and image.id in security else {}),
            }
        )
    return rows


def plan_json(plan: Plan, states: dict[str, dict[str, Any]] | None = None,
              layers: dict[str, list[dict[str, Any]]] | None = None,
              security: Mapping[str, Staleness] | None = None) -> str:
    return json.dumps(plan_rows(plan, states, layers, security), indent=2)


def github_matrix(plan: Plan) -> str:
    """One job per variant: {"include": [{"variant", "only", "matrix", "torch", "cuda", "python", "os"}]}."""
    seen: dict[str, dict[str, Any]] = {}
    keys = {i.variant.key for i in plan.images}
    for image in plan.images:
        v = image.variant
        if v.key not in seen:
            # `K-*` would also select a sibling platform's `K-arm64-*` images: name the flavors instead
            sibling = any(k != v.key and k.startswith(v.key + "-") for k in keys)
            seen[v.key] = {
                "variant": v.key,
                "only": ",".join(f"{v.key}-{f}" for f in v.flavors) if sibling else f"{v.key}-*",
                "matrix": plan.matrix_file,
                "torch": v.versions.torch,
                "cuda": v.versions.cuda,
                "python": v.versions.python,
                "os": v.versions.os,
                "flavors": " ".join(f for f in v.flavors),
                **({"platform": v.platform} if v.platform != DEFAULT_PLATFORM else {}),
            }
    return json.dumps({"include": list(seen.values())}, separators=(",", ":"))


def print_table(plan: Plan, console: Console | None = None, states: dict[str, dict[str, Any]] | None = None,
                security: Mapping[str, Staleness] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    if not console.is_terminal:  # piped or CI logs: don't squeeze the table to 80 columns
        console = Console(width=200)
    repos = sorted({i.repository for i in plan.images})
    table = Table(title=f"{plan.matrix_file}: {len(plan.images)} images -> {', '.join(repos)}", show_lines=False)
    cols = ["tag", "flavor", "parent", "torch", "cuda", "cudnn", "nccl", "py", "os", "TE", "hash"]
    platforms = any(i.variant.platform != DEFAULT_PLATFORM for i in plan.images)
    if platforms:  # a single-platform plan prints as before
        cols.insert(2, "platform")
    if states is not None:
        cols.append("built")
    if security is not None:
        cols.append("security")
    for col in cols:
        table.add_column(col, overflow="fold", no_wrap=col != "tag", min_width=len(col))
    by_tag = plan.by_tag()
    for image in plan.images:
        v = image.variant.versions
        extra = [] if states is None else [(states.get(image.id) or {}).get("summary", "-")]
        if security is not None:
            extra.append(security[image.id].summary if image.id in security else "not checked")
        table.add_row(
            image.short_tag,
            image.flavor,
            *([image.variant.platform] if platforms else []),
            by_tag[image.parent].flavor if image.parent in by_tag else (image.parent or "-"),
            v.torch,
            v.cuda,
            v.cudnn or "-",
            v.nccl or "-",
            v.python,
            v.os,
            v.transformer_engine or "-",
            image.inputs_hash.split(":")[1][:12],
            *extra,
        )
    console.print(table)
    chosen = {(i.variant.key, k): msg for i in plan.images for k, msg in i.variant.chosen.items()}
    for (key, _field), msg in sorted(chosen.items()):
        console.print(f"  [dim]{key}: {msg}[/dim]")
    for image in plan.images if security is not None else ():
        s = security[image.id] if security is not None and image.id in security else None
        if s is not None and (s.index or s.why):
            detail = s.changes(limit=5) if s.fixes else s.why
            console.print(f"  {image.short_tag}: {s.summary}" + (f" against {s.index}" if s.index else "")
                          + (f": {detail}" if detail else ""), markup=False, highlight=False)
