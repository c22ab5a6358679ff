"""Image reference grammar (the one docker/distribution's `reference` package implements).

    reference   := name [ ":" tag ] [ "@" digest ]
    name        := [ domain "/" ] path-component ( "/" path-component )*
    domain      := host [ ":" port ]        host: DNS labels separated by ".", "localhost", or [IPv6]
    path-comp.  := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
    tag         := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
    digest      := "sha256:" 64 lowercase hex   (we only accept sha256, the only one registries use)

The first component is a domain only when it contains "." or ":" or is "localhost" (docker's rule), so
`nvidia/cuda:12.8.1-base-ubuntu24.04` is Docker Hub's `nvidia/cuda`. Errors say which part is wrong, because "invalid
reference format" is what users get from docker and it helps nobody.

`Reference` keeps the reference as written (`str()` gives it back unchanged, which is what Dockerfiles and tags carry)
and answers the normalised questions: `.registry` (the host: `docker.io` when none is written) and `.repository` (the
path inside that registry: `library/ubuntu` for Docker Hub's official images), as registries and the engine see them.
Moving aliases (`2.9-cuda12.8-runtime`) are decided by the plan (`imagebuild.plan.tags`); `alias_reference` turns an
alias, written as a full reference or as a short tag of the image's repository, into the reference it is pushed as.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from imagebuild.hints import credentials_hint

DOCKER_HUB = "docker.io"  # the registry of a reference that names none
_HUB_ALIASES = frozenset({DOCKER_HUB, "index.docker.io"})  # docker normalises the legacy name too
_OFFICIAL = "library"  # Docker Hub's namespace for single-component names: `ubuntu` is `library/ubuntu`

_DOMAIN_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = re.compile(rf"^(?:{_DOMAIN_LABEL}(?:\.{_DOMAIN_LABEL})*|\[[0-9a-fA-F:.]+\])$")
_PORT = re.compile(r"^[0-9]{1,5}$")
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_NAME_MAX = 255


class ReferenceSyntaxError(ValueError):
    """The message names the wrong part of the reference."""


@dataclass(frozen=True)
class Reference:
    """An image reference as written: `Reference.parse("ubuntu:24.04")` has domain None, path "ubuntu"."""

    domain: str | None  # "registry.example.internal:5000"; None = Docker Hub (not written)
    path: str  # "ml/pytorch", "nvidia/cuda", "ubuntu" (as written: no "library/" added)
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> Reference:
        """Parse `text` as an image reference; raises ReferenceSyntaxError naming what is wrong."""
        return parse_reference(text)

    @property
    def name(self) -> str:
        """The repository as written, without tag or digest: `localhost:5000/a/b`, `ubuntu`."""
        return f"{self.domain}/{self.path}" if self.domain else self.path

    @property
    def registry(self) -> str:
        """The registry host: the written domain, or `docker.io` (also for the legacy index.docker.io)."""
        if self.domain is None or self.domain in _HUB_ALIASES:
            return DOCKER_HUB
        return self.domain

    @property
    def repository(self) -> str:
        """The path inside its registry, as the v2 API names it: `library/ubuntu` for Docker Hub's `ubuntu`."""
        if self.registry == DOCKER_HUB and "/" not in self.path:
            return f"{_OFFICIAL}/{self.path}"
        return self.path

    def normalized(self) -> Reference:
        """The fully qualified form: `ubuntu:24.04` -> `docker.io/library/ubuntu:24.04`."""
        return replace(self, domain=self.registry, path=self.repository)

    def with_tag(self, tag: str) -> Reference:
        """The same repository under `tag` (no digest: a digest pins the old content, not the new tag)."""
        if not _TAG.match(tag):
            raise ReferenceSyntaxError(f"tag {tag!r} is invalid: [A-Za-z0-9_] then up to 127 of [A-Za-z0-9_.-]")
        return replace(self, tag=tag, digest=None)

    def with_registry(self, domain: str | None) -> Reference:
        """The same path, tag and digest in another registry (`None`: Docker Hub as written, no domain)."""
        if domain is not None:
            _check_domain(domain)
        return replace(self, domain=domain)

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def _check_domain(domain: str) -> None:
    if domain.startswith("["):  # [IPv6]:port
        end = domain.find("]")
        host, rest = domain[: end + 1], domain[end + 1 :]
        if end < 0 or (rest and not rest.startswith(":")):
            raise ReferenceSyntaxError(f"registry host {domain!r} is not a valid [IPv6] address")
        port = rest[1:]
    else:
        host, _, port = domain.partition(":")
    if not _HOST.match(host):
        raise ReferenceSyntaxError(f"registry host {host!r} is not a valid host name")
    if ":" in domain[len(host):] and (not _PORT.match(port) or not 0 < int(port) < 65536):
        raise ReferenceSyntaxError(f"registry port {port!r} is not a number between 1 and 65535")


def _split_domain(name: str) -> tuple[str | None, str]:
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        return first, rest
    return None, name


def _check_path(path: str) -> None:
    if not path:
        raise ReferenceSyntaxError("repository path is empty")
    for comp in path.split("/"):
        if not comp:
            raise ReferenceSyntaxError(f"repository path {path!r} has an empty component ('//' or a trailing '/')")
        if not _PATH_COMPONENT.match(comp):
            hint = " (must be lowercase)" if comp.lower() != comp else ""
            raise ReferenceSyntaxError(
                f"repository path component {comp!r} is invalid{hint}: use [a-z0-9] separated by '.', '_', '__' or '-'"
            )


def parse_reference(text: str) -> Reference:
    """Parse `text` as an image reference; raises ReferenceSyntaxError naming what is wrong."""
    if not isinstance(text, str) or not text:
        raise ReferenceSyntaxError("empty reference")
    if text != text.strip() or any(c.isspace() for c in text):
        raise ReferenceSyntaxError("a reference cannot contain spaces")
    name, digest = text, None
    if "@" in text:
        name, _, digest = text.partition("@")
        if not _DIGEST.match(digest):
            raise ReferenceSyntaxError(f"digest {digest!r} must be sha256:<64 lowercase hex digits>")
    tag = None
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:  # a ':' after the last '/' separates the tag (before it, it is a registry port)
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.match(tag):
            raise ReferenceSyntaxError(f"tag {tag!r} is invalid: [A-Za-z0-9_] then up to 127 of [A-Za-z0-9_.-]")
    if len(name) > _NAME_MAX:
        raise ReferenceSyntaxError(f"repository name is longer than {_NAME_MAX} characters")
    domain, path = _split_domain(name)
    if domain is not None:
        _check_domain(domain)
    _check_path(path)
    return Reference(domain, path, tag, digest)


def alias_reference(repository: str, alias: str) -> str:
    """An image's alias as the full reference it is tagged and pushed as.

    The plan writes aliases as full references (`reg/ml/pytorch:2.9-cuda12.8-runtime`); a short tag (`short-alias`)
    is a tag of the image's own `repository`. Only formats: which image owns an alias is the plan's decision."""
    if ":" in alias.rsplit("/", 1)[-1]:
        return alias
    return f"{repository}:{alias}"


def check_registry(text: str) -> str:
    """A push target `domain[:port][/path]` (no tag, no digest): returns it normalised (no trailing '/')."""
    registry = text.rstrip("/")
    scheme, sep, _ = registry.partition("://")
    if sep and "/" not in scheme:
        raise ReferenceSyntaxError(f"a registry is host[:port][/path] without '{scheme}://' (the engine picks https, or "
                             "http for a registry it is told is insecure)")
    if "@" in registry.split("/", 1)[0]:
        raise ReferenceSyntaxError(f"a registry cannot carry credentials; give them with {credentials_hint()}")
    if "@" in registry:
        raise ReferenceSyntaxError("a registry cannot carry a digest; put only host[:port][/path]")
    last = registry.rsplit("/", 1)[-1]
    if ":" in last and "/" in registry:
        raise ReferenceSyntaxError("a registry cannot carry a tag; the tag comes from the variant")
    # Validate as `<registry>/<probe>`, which is the repository every image of the matrix will get.
    ref = parse_reference(f"{registry}/probe")
    if ref.tag:
        raise ReferenceSyntaxError("a registry cannot carry a tag; the tag comes from the variant")
    return registry


TAG_ROOM = 64  # our tags (`2.10.0-cu128-cudnn9-py3.12-ubuntu24.04-runtime`) are under 50 characters
REFERENCE_MAX = 255  # what engines and registries accept for a whole `registry/name:tag`


def check_repository_room(repository: str) -> None:
    """`registry/name` must leave room for our tags within REFERENCE_MAX (the build would fail tagging otherwise)."""
    room = REFERENCE_MAX - 1 - TAG_ROOM
    if len(repository) > room:
        raise ReferenceSyntaxError(f"registry/name is {len(repository)} characters; with a ':tag' of up to {TAG_ROOM} an "
                             f"image reference would pass {REFERENCE_MAX}: keep registry/name within {room}")


def check_repository_name(text: str) -> str:
    """The matrix `name`: a repository path without registry or tag."""
    if ":" in text or "@" in text:
        raise ReferenceSyntaxError("name is the repository only; tags come from the variants")
    _check_path(text)
    return text
