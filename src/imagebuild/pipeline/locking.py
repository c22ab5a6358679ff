"""`lock`'s Locker wired to the stages it asks: the bootstrap's apt suite lines (so the lock pins what a build's
bootstrap installs) and the registry's digest of each registry base image."""

from __future__ import annotations

from collections.abc import Callable

from imagebuild.builder.bootstrap import spec_for
from imagebuild.inputs import BuildInputs
from imagebuild.lock.generate import Locker
from imagebuild.models import ResolvedVariant
from imagebuild.oci import Reference, RegistryClient, resolve_auth


def _sources_for(variant: ResolvedVariant) -> tuple[list[str], tuple[str, ...]]:
    spec = spec_for(variant)  # the same suite lines (and snapshot URLs) the bootstrap uses
    return spec.sources(), spec.packages


def _registry_digest(ref: str) -> str | None:
    parsed = Reference.parse(ref)
    if parsed.digest:
        return parsed.digest
    client = RegistryClient(resolve_auth(parsed.registry))
    return client.manifest_digest(parsed.repository, parsed.tag or "latest")


def make_locker(inputs: BuildInputs, echo: Callable[[str], None] | None = None) -> Locker:
    """A Locker with this machine's apt sources (the bootstrap's suite lines) and registry digests."""
    return Locker(sources_for=_sources_for, registry_digest=_registry_digest,
                  ca_files=tuple(str(p) for p in inputs.ca_certs), log=echo or (lambda m: None))
