"""Options from the command line that change what is rendered (and so the inputs hash)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.secrets import redact


@dataclass(frozen=True)
class SecurityRefresh:
    """`build --security-refresh`'s word for one image (plan id): the security suite's identity it saw (suite@InRelease
    Date/sha256) and the packages its apt step upgrades (by name). Rendered into the image's apt step only when
    present, so the step's cache key (and the inputs hash) carries the index it saw."""

    image: str
    index: str
    upgrade: tuple[str, ...] = ()

    def public(self) -> dict[str, Any]:
        return {"index": self.index, "upgrade": list(self.upgrade)}


@dataclass(frozen=True)
class BuildInputs:
    ca_certs: tuple[Path, ...] = ()  # extra CA files (added to matrix `ca_certs`)
    pip_index_url: str | None = None  # replaces PyPI; may carry credentials (kept out of final layers)
    pip_extra_index_urls: tuple[str, ...] = ()
    torch_index_url: str | None = None  # overrides the resolved torch index; "none" disables it
    wheelhouse: Path | None = None  # local wheel folder, visible to pip stages only
    backend: str | None = None  # a row of imagebuild/backends.py, or "auto" until a build resolves it; None: the matrix's
    security_refresh: tuple[SecurityRefresh, ...] = ()  # per image; kept by later builds (pipeline/loaded.py)

    def refresh_for(self, image: str) -> SecurityRefresh | None:
        return next((r for r in self.security_refresh if r.image == image), None)

    def public(self) -> dict[str, Any]:
        """A loggable, hashable view: credentials replaced."""
        backend: dict[str, Any] = {"backend": self.backend} if self.backend else {}  # absent unless asked: older records still match
        if self.security_refresh:  # absent unless refreshed, as the backend
            backend["security_refresh"] = {r.image: r.public() for r in sorted(self.security_refresh, key=lambda r: r.image)}
        return {**backend,
            "ca_certs": [str(p) for p in self.ca_certs],
            "pip_index_url": redact(self.pip_index_url) if self.pip_index_url else None,
            "pip_extra_index_urls": [redact(u) for u in self.pip_extra_index_urls],
            "torch_index_url": redact(self.torch_index_url) if self.torch_index_url else None,
            "wheelhouse": str(self.wheelhouse) if self.wheelhouse else None,
        }
