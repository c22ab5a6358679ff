"""Push built images to a registry: retries, digest verification, skip-if-unchanged, credentials.

    from imagebuild.engine import connect
    from imagebuild.push import push_plan, resolve_auth
    results = push_plan(plan, client=connect("push"), auth_for=lambda reg: resolve_auth(reg))
"""

from imagebuild.push.auth import RegistryAuth, read_password_stdin, registry_of, repository_path, resolve_auth
from imagebuild.push.pusher import (
    DEFAULT_RETRIES,
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

__all__ = [
    "DEFAULT_RETRIES", "PushAuthError", "PushError", "Pusher", "RegistryAuth",
    "RegistryAuthError", "RegistryClient", "RegistryError", "alias_owners", "classify", "gate",
    "parse_push_stream", "push_plan", "read_password_stdin", "registry_of", "repository_path", "resolve_auth",
    "result_for",
]
