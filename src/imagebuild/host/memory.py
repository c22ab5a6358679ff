"""The host's memory size, from <root>/proc/meminfo."""

from __future__ import annotations

from pathlib import Path


def mem_total_bytes(root: Path = Path("/")) -> int | None:
    """MemTotal in bytes, or None when the file is missing or has no MemTotal line."""
    try:
        text = (root / "proc" / "meminfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                unit = parts[2].lower() if len(parts) > 2 else "kb"
                return int(parts[1]) * (1024 if unit == "kb" else 1)
    return None
