"""Is a built image stale against its release's security suite? The audit's OS check (os.py) on the image the record
says was built, reduced to what `plan --security` shows and `build --security-refresh` acts on: "stale" (the suite
offers N fixes: each package installed -> fixed), "fresh" (every package looked up, none fixed there) or "not checked"
(no image, no trusted index, packages that could not be looked up): never fresh unless checked."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from imagebuild.audit.debian import IndexUnavailable, SecurityIndex, SecurityIndexes, suite_for
from imagebuild.audit.model import CHECKED, Finding
from imagebuild.audit.os import Changelogs, Installed, audit_os

STALE, FRESH, NOT_CHECKED = "stale", "fresh", "not checked"


def index_identity(index: SecurityIndex) -> str:
    """The suite as this run saw it: `bookworm-security@<InRelease Date>/sha256:<InRelease sha256, 12>`."""
    return f"{index.suite.suite}@{index.date}/sha256:{index.inrelease_sha256[:12]}"


@dataclass(frozen=True)
class Staleness:
    state: str  # STALE | FRESH | NOT_CHECKED
    index: str = ""  # index_identity of the suite checked against ("" when none was read)
    fixes: tuple[Finding, ...] = ()
    why: str = ""  # NOT_CHECKED: why; else details (packages not looked up)
    image_id: str | None = None  # the image checked
    upgradable: tuple[str, ...] = ()  # the fixed packages the suite offers by the same binary name (apt can upgrade
    # them; a binary the suite no longer builds is matched by its source and stays open until the image drops it)

    @property
    def summary(self) -> str:
        """The plan table's `security` cell."""
        if self.state == STALE:
            return f"stale: {len(self.fixes)} security fix{'es' if len(self.fixes) != 1 else ''}"
        return self.state

    def changes(self, limit: int | None = None) -> str:
        """`libssl3 3.0.11-1~deb12u2→3.0.17-1~deb12u3, …` (the first `limit`, then how many more)."""
        parts = [f"{f.package} {f.installed}→{f.fixed}" for f in self.fixes]
        if limit is not None and len(parts) > limit:
            parts = [*parts[:limit], f"… {len(parts) - limit} more"]
        return ", ".join(parts)

    def stale_json(self) -> dict[str, Any] | bool | None:
        """plan --json's `stale`: the fixes and index when stale, false when checked fresh, null when not checked."""
        if self.state == STALE:
            return {"security_fixes": len(self.fixes), "index": self.index,
                    "fixes": [{"package": f.package, "installed": f.installed, "fixed": f.fixed,
                               "source_package": f.source_package} for f in self.fixes]}
        return False if self.state == FRESH else None

    def as_json(self) -> dict[str, Any]:
        """plan --json's `security`: the state with its index, image and why."""
        return {"state": self.state, "security_fixes": len(self.fixes) if self.state != NOT_CHECKED else None,
                "index": self.index or None, "image_id": self.image_id, "why": self.why or None}


def not_checked(why: str, image_id: str | None = None) -> Staleness:
    return Staleness(NOT_CHECKED, why=why, image_id=image_id)


def staleness(os_id: str, codename: str, arch: str, debs: Iterable[Installed], indexes: SecurityIndexes,
              image_id: str | None = None) -> Staleness:
    """One image's dpkg packages against its security suite (no changelogs are read: only the count and versions)."""
    got = audit_os(os_id, codename, arch, debs, indexes, Changelogs(None))
    if got.status.state != CHECKED:
        return not_checked(f"{got.status.source}: {got.status.detail}", image_id)
    suite = suite_for(indexes.tables, os_id, codename, arch)
    try:
        assert suite is not None  # audit_os checked it
        index = indexes.get(suite)  # the run's one read of this suite
        identity = index_identity(index)
    except (AssertionError, IndexUnavailable) as exc:
        return not_checked(str(exc), image_id)
    missed = (f"{len(got.not_looked_up)} package(s) not looked up: "
              + ", ".join(f"{m.package} ({m.reason})" for m in got.not_looked_up[:3])) if got.not_looked_up else ""
    if got.findings:
        upgradable = tuple(f.package for f in got.findings if f.package in index.binaries)
        return Staleness(STALE, identity, got.findings, missed, image_id, upgradable)
    if missed:  # nothing found among the rest, but not every package was compared: not called fresh
        return Staleness(NOT_CHECKED, identity, (), missed, image_id)
    return Staleness(FRESH, identity, (), "", image_id)


def lock_notes(findings: Iterable[Finding], pins: dict[str, str], lock_name: str) -> tuple[Finding, ...]:
    """A locked image's findings: one whose package the lock pins says so (a rebuild without --security-refresh
    installs the pinned version again; `build --security-refresh` raises the pin to the fix)."""
    import dataclasses

    out = []
    for f in findings:
        if f.kind == "os" and f.package in pins:
            said = f"pinned in {lock_name} at {pins[f.package]}: build --security-refresh raises the pin to {f.fixed}"
            f = dataclasses.replace(f, note="; ".join(n for n in (f.note, said) if n))
        out.append(f)
    return tuple(out)
