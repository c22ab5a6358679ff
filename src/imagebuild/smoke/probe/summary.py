"""The short text table of a probe result (`python probe.pyz --table FILE`, scripts/gpu-probe.sh)."""

from __future__ import annotations


def render_table(doc: dict) -> str:
    v = doc.get("versions") or {}
    g = doc.get("gpu") or {}
    lines = [
        "torch {t}  cuda {c}  cudnn {d}  nccl {n}  python {p}  te {te}".format(
            t=v.get("torch"), c=v.get("cuda"), d=v.get("cudnn"), n=v.get("nccl"), p=v.get("python"),
            te=v.get("transformer_engine")),
        "gpus: " + (", ".join(f"{d['index']}:{d['name']}({d['sm']})" for d in g.get("devices", [])) or "none"),
        "",
        f"{'CHECK':<24} {'STATUS':<8} REASON",
    ]
    for c in doc.get("checks", []):
        lines.append(f"{c['name']:<24} {c['status']:<8} {c.get('reason', '')[:100]}")
    counts = {s: sum(1 for c in doc.get("checks", []) if c["status"] == s) for s in ("passed", "failed", "skipped")}
    lines.append("")
    lines.append(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped in "
                 f"{(doc.get('probe') or {}).get('seconds', '?')} s")
    return "\n".join(lines)
