"""Push built images to a registry: retries, digest verification, skip-if-unchanged, credentials.

    from imagebuild.push import push_plan, resolve_auth, connect_engine
    results = push_plan(plan, client=connect_engine(), auth_for=lambda reg: resolve_auth(reg))
"""

from imagebuild.push.auth import RegistryAuth, read_password_stdin, registry_of, repository_path, resolve_auth
from imagebuild.push.pusher import (
    DEFAULT_RETRIES,
    PUSH_CLIENT_TIMEOUT,
    PushAuthError,
    Pusher,
    PushError,
    alias_owners,
    classify,
    gate,
    parse_push_stream,
    push_plan,
    result_for,
)
from imagebuild.push.registry import RegistryAuthError, RegistryClient, RegistryError


def connect_engine(timeout: int = PUSH_CLIENT_TIMEOUT):
    """A docker client whose read timeout fits multi-GB layer uploads (the SDK default is 60 s)."""
    from imagebuild.build.engine import connect

    return connect(timeout=timeout)


__all__ = [
    "DEFAULT_RETRIES", "PUSH_CLIENT_TIMEOUT", "PushAuthError", "PushError", "Pusher", "RegistryAuth",
    "RegistryAuthError", "RegistryClient", "RegistryError", "alias_owners", "classify", "connect_engine", "gate",
    "parse_push_stream", "push_plan", "read_password_stdin", "registry_of", "repository_path", "resolve_auth",
    "result_for",
]
