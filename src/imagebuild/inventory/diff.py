"""What changed from one image to another, as a pure function of two Inventories, and its text / JSON forms.

    from imagebuild.inventory import diff, format_diff, read_local
    d = diff(read_local(client, old_id), read_local(client, new_id))
    print(format_diff(d))          # or diff_to_json(d)

Packages are matched by name (debs by name and architecture, Python distributions by normalized name); a Python
distribution installed in two places counts as the set of its versions. Layers are matched by diff_id (the digest
of the uncompressed layer), which is the same in the engine and in a registry.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from imagebuild.inventory.model import Inventory, Layer
from imagebuild.units import format_size

VERSION_LABEL_PREFIXES = ("io.imagebuild.", "org.opencontainers.")
# the shell prefix of history lines ("/bin/sh -c #(nop) COPY ...", "/bin/bash -o pipefail -c set -eux; ...")
_SHELL = re.compile(r"^\S*sh(?: -o \S+)* -c (?:#\(nop\)\s*)?")


@dataclass(frozen=True)
class Change:
    name: str
    old: str  # "" when added
    new: str  # "" when removed


@dataclass(frozen=True)
class LayerRow:
    diff_id: str
    size_a: int | None  # None: not in A (or size unknown)
    size_b: int | None
    in_a: bool
    in_b: bool
    created_by: str = ""


@dataclass(frozen=True)
class InventoryDiff:
    a: str  # "reference (image id)"
    b: str
    a_id: str
    b_id: str
    same_image: bool
    os_added: tuple[Change, ...] = ()
    os_removed: tuple[Change, ...] = ()
    os_changed: tuple[Change, ...] = ()
    py_added: tuple[Change, ...] = ()
    py_removed: tuple[Change, ...] = ()
    py_changed: tuple[Change, ...] = ()
    labels: tuple[Change, ...] = ()  # version labels (io.imagebuild.*, org.opencontainers.*) that differ
    layers: tuple[LayerRow, ...] = ()  # A's layers in order, then B's layers that A does not have
    size_kind_a: str = "uncompressed"
    size_kind_b: str = "uncompressed"
    totals: dict[str, int | None] = field(default_factory=dict)  # a, b, shared

    @property
    def packages_changed(self) -> bool:
        return any((self.os_added, self.os_removed, self.os_changed, self.py_added, self.py_removed,
                    self.py_changed))


def _deb_versions(inv: Inventory) -> dict[str, str]:
    arch = inv.architecture
    out: dict[str, str] = {}
    for p in inv.debs:
        name = p.name if p.architecture in ("", "all", arch) else f"{p.name}:{p.architecture}"
        out[name] = p.version
    return out


def _py_versions(inv: Inventory) -> dict[str, str]:
    found: dict[str, set[str]] = {}
    for d in inv.pythons:
        found.setdefault(d.key, set()).add(d.version)
    return {k: ", ".join(sorted(v)) for k, v in found.items()}


def _compare(a: dict[str, str], b: dict[str, str]) -> tuple[tuple[Change, ...], ...]:
    added = tuple(Change(n, "", b[n]) for n in sorted(b.keys() - a.keys()))
    removed = tuple(Change(n, a[n], "") for n in sorted(a.keys() - b.keys()))
    changed = tuple(Change(n, a[n], b[n]) for n in sorted(a.keys() & b.keys()) if a[n] != b[n])
    return added, removed, changed


def _total(layers: tuple[Layer, ...]) -> int | None:
    sizes = [layer.size for layer in layers]
    return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)


def _layer_rows(a: Inventory, b: Inventory) -> tuple[tuple[LayerRow, ...], dict[str, int | None]]:
    in_b = {layer.diff_id: layer for layer in b.layers}
    in_a = {layer.diff_id: layer for layer in a.layers}
    rows = [LayerRow(layer.diff_id, layer.size, in_b[layer.diff_id].size if layer.diff_id in in_b else None,
                     True, layer.diff_id in in_b, layer.created_by) for layer in a.layers]
    rows += [LayerRow(layer.diff_id, None, layer.size, False, True, layer.created_by)
             for layer in b.layers if layer.diff_id not in in_a]
    shared = [r for r in rows if r.in_a and r.in_b]
    shared_sizes = [r.size_b if r.size_b is not None else r.size_a for r in shared]
    totals = {"a": _total(a.layers), "b": _total(b.layers),
              "shared": None if any(s is None for s in shared_sizes) else sum(s or 0 for s in shared_sizes)}
    return tuple(rows), totals


def diff(a: Inventory, b: Inventory) -> InventoryDiff:
    """A → B: what B adds, removes and changes relative to A."""
    os_added, os_removed, os_changed = _compare(_deb_versions(a), _deb_versions(b))
    py_added, py_removed, py_changed = _compare(_py_versions(a), _py_versions(b))
    la = {k: v for k, v in a.labels.items() if k.startswith(VERSION_LABEL_PREFIXES)}
    lb = {k: v for k, v in b.labels.items() if k.startswith(VERSION_LABEL_PREFIXES)}
    added, removed, changed = _compare(la, lb)
    labels = tuple(sorted(added + removed + changed, key=lambda c: c.name))
    layers, totals = _layer_rows(a, b)
    return InventoryDiff(
        a=f"{a.reference} ({a.image_id[:19]})", b=f"{b.reference} ({b.image_id[:19]})", a_id=a.image_id,
        b_id=b.image_id, same_image=a.image_id == b.image_id,
        os_added=os_added, os_removed=os_removed, os_changed=os_changed,
        py_added=py_added, py_removed=py_removed, py_changed=py_changed,
        labels=labels, layers=layers, size_kind_a=a.size_kind, size_kind_b=b.size_kind, totals=totals,
    )


def diff_to_json(d: InventoryDiff) -> dict[str, Any]:
    data = asdict(d)
    data["packages_changed"] = d.packages_changed
    return data


def _size(n: int | None) -> str:
    return "?" if n is None else format_size(n, 1)


def _section(title: str, added: tuple[Change, ...], removed: tuple[Change, ...],
             changed: tuple[Change, ...]) -> list[str]:
    lines = [f"{title}: {len(added)} added, {len(removed)} removed, {len(changed)} changed"]
    lines += [f"  + {c.name} {c.new}" for c in added]
    lines += [f"  - {c.name} {c.old}" for c in removed]
    lines += [f"  ~ {c.name} {c.old} → {c.new}" for c in changed]
    return lines


def format_diff(d: InventoryDiff) -> str:
    """The diff as text for a terminal or a Markdown code block."""
    lines = [f"A: {d.a}", f"B: {d.b}"]
    if d.same_image:
        lines.append("same image")
    lines += _section("OS packages", d.os_added, d.os_removed, d.os_changed)
    lines += _section("Python packages", d.py_added, d.py_removed, d.py_changed)
    lines.append(f"version labels: {len(d.labels)} differ")
    for c in d.labels:
        lines.append(f"  {c.name}: {c.old or '(none)'} → {c.new or '(none)'}")
    kinds = d.size_kind_a if d.size_kind_a == d.size_kind_b else f"A {d.size_kind_a}, B {d.size_kind_b}"
    shared = sum(1 for r in d.layers if r.in_a and r.in_b)
    lines.append(f"layers ({kinds} sizes): A {sum(r.in_a for r in d.layers)}, B {sum(r.in_b for r in d.layers)}, "
                 f"{shared} shared")
    for r in d.layers:
        where = "A B" if r.in_a and r.in_b else ("A  " if r.in_a else "  B")
        size = _size(r.size_a if r.in_a else r.size_b)
        step = _SHELL.sub("", r.created_by.replace("\n", " ").strip())
        step = step if len(step) <= 60 else step[:57] + "..."
        lines.append(f"  {where}  {r.diff_id[7:19]}  {size:>9}  {step}".rstrip())
    t = d.totals
    lines.append(f"total: A {_size(t.get('a'))}, B {_size(t.get('b'))}, shared {_size(t.get('shared'))}")
    return "\n".join(lines) + "\n"
