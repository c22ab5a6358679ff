"""Registry credentials: where they come from, and how they are kept out of logs and command lines.

Order: `--username` + `--password-stdin` (or `--username` with IMAGEBUILD_REGISTRY_PASSWORD) > the environment pair
IMAGEBUILD_REGISTRY_USER / IMAGEBUILD_REGISTRY_PASSWORD > the docker config (`~/.docker/config.json` or
$DOCKER_CONFIG/config.json: `auths`, `credsStore`, `credHelpers`, resolved by the docker SDK, which runs
`docker-credential-<helper> get`). Nothing here writes credentials anywhere: they live in memory, are handed to the
engine in the X-Registry-Auth header of the push request and to the registry in Authorization headers, and every
password/token is registered with `imagebuild.secrets` so `redact()` hides it in any message.

Where credentials may go (`credentials_refused`): to the registry's own host, or to a token service (the `realm` of
its Bearer challenge) over https. A registry is free to name any realm, so a hostile or hijacked one could otherwise
collect the password by naming its own collector, or make it travel in clear over http.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO

from imagebuild.errors import UsageError
from imagebuild.oci.reference import DOCKER_HUB
from imagebuild.secrets import register_secret

ENV_USER = "IMAGEBUILD_REGISTRY_USER"
ENV_PASSWORD = "IMAGEBUILD_REGISTRY_PASSWORD"


@dataclass
class RegistryAuth:
    registry: str  # Reference.registry: "127.0.0.1:5000", "ghcr.io"; "docker.io" for Docker Hub
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    identity_token: str | None = field(default=None, repr=False)  # OAuth refresh token (docker login --identity)
    source: str = "none"  # "options" | "environment" | "docker-config" | "none"

    @property
    def anonymous(self) -> bool:
        return not (self.password or self.identity_token)

    def sdk_auth_config(self) -> dict[str, str] | None:
        """The dict for an engine pull's `auth_config=` (sent to the engine as X-Registry-Auth)."""
        if self.identity_token:
            return {"identitytoken": self.identity_token, "serveraddress": self.registry}
        if self.username and self.password:
            return {"username": self.username, "password": self.password, "serveraddress": self.registry}
        return None

    def describe(self) -> str:
        """Loggable: who, from where; never the secret."""
        if self.anonymous:
            return f"{self.registry}: anonymous"
        who = self.username or "<identity token>"
        return f"{self.registry}: {who} (from {self.source})"


def read_password_stdin(stream: IO[str]) -> str:
    """First line of stdin (as `docker login --password-stdin`): trailing newline removed, nothing else."""
    data = stream.read()
    password = data[:-1] if data.endswith("\n") else data
    password = password[:-1] if password.endswith("\r") else password
    if not password:
        raise UsageError("--password-stdin: nothing on standard input")
    return password


def resolve_auth(
    registry: str,
    username: str | None = None,
    password: str | None = None,
    env: Mapping[str, str] | None = None,
    docker_config: str | None = None,
) -> RegistryAuth:
    """Credentials for `registry` (a `Reference.registry`; see module docstring for the order). Registers every
    secret found."""
    env = os.environ if env is None else env
    if password is not None and not username:
        raise UsageError("--password-stdin needs --username")
    if username:
        password = password if password is not None else env.get(ENV_PASSWORD)
        if not password:
            raise UsageError(
                f"--username {username}: no password; pipe it into --password-stdin or set {ENV_PASSWORD}"
            )
        register_secret(password)
        return RegistryAuth(registry, username, password, source="options")
    env_user, env_pw = env.get(ENV_USER), env.get(ENV_PASSWORD)
    if env_user and env_pw:
        register_secret(env_pw)
        return RegistryAuth(registry, env_user, env_pw, source="environment")
    found = _from_docker_config(registry, docker_config)
    if found is not None:
        return found
    return RegistryAuth(registry)


def _from_docker_config(registry: str, config_path: str | None) -> RegistryAuth | None:
    import docker.auth
    import docker.errors

    try:
        cfg = docker.auth.load_config(config_path=config_path)
        entry = cfg.resolve_authconfig(None if registry == DOCKER_HUB else registry)
    except docker.errors.DockerException as exc:  # credential helper missing or failing
        raise UsageError(f"docker config: credentials for {registry}: {exc}") from exc
    if not entry:
        return None
    get = {k.lower(): v for k, v in entry.items()}.get
    user, pw, token = get("username"), get("password"), get("identitytoken")
    if not (pw or token):
        return None
    register_secret(pw)
    register_secret(token)
    return RegistryAuth(registry, user, pw, token, source="docker-config")


def credentials_refused(registry_url: str, target_url: str) -> str | None:
    """Why credentials for the registry at `registry_url` (scheme://host[:port]) must not be sent to `target_url`,
    or None when they may: the same host and port, or another host over https. Never another scheme than http(s)."""
    reg, target = urllib.parse.urlsplit(registry_url), urllib.parse.urlsplit(target_url)
    if target.scheme not in ("http", "https") or not target.hostname:
        return f"the token service {target_url!r} is not an http(s) address"
    if (target.hostname, target.port or _default_port(target.scheme)) == (reg.hostname, reg.port or
                                                                              _default_port(reg.scheme)):
        return None
    if target.scheme != "https":
        return (f"the token service {target.scheme}://{target.netloc} is another host over plain http; credentials "
                "go to another host only over https")
    return None


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80
