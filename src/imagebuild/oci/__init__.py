"""Images as registries see them: the one image-reference type, the registry v2 client, registry credentials.

    from imagebuild.oci import Reference, RegistryClient, resolve_auth
    ref = Reference.parse("127.0.0.1:5000/ml/pytorch:2.9-cpu-runtime")
    ref.registry, ref.repository, ref.tag        # "127.0.0.1:5000", "ml/pytorch", "2.9-cpu-runtime"
    RegistryClient(resolve_auth(ref.registry)).manifest_digest(ref.repository, ref.tag)

No module here imports docker at import time (the docker config is read only when credentials are resolved).
"""

from imagebuild.oci.auth import ENV_PASSWORD, ENV_USER, RegistryAuth, read_password_stdin, resolve_auth
from imagebuild.oci.reference import (
    DOCKER_HUB,
    Reference,
    ReferenceSyntaxError,
    alias_reference,
    check_registry,
    check_repository_name,
    parse_reference,
)
from imagebuild.oci.registry import RegistryAuthError, RegistryClient, RegistryError, registry_message

__all__ = [
    "DOCKER_HUB", "ENV_PASSWORD", "ENV_USER", "Reference", "ReferenceSyntaxError",
    "RegistryAuth", "RegistryAuthError",
    "RegistryClient", "RegistryError", "alias_reference", "check_registry", "check_repository_name",
    "parse_reference", "read_password_stdin", "registry_message", "resolve_auth",
]
