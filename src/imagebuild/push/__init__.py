"""Push built images to a registry: zstd (or gzip) by digest, then the tags; retries, digest verification,
skip-if-unchanged.

The registry client, credentials and image references live in `imagebuild.oci`; which references an image is pushed
under (its tag and the aliases it owns) is the plan's decision (`imagebuild.plan.tags.references`).

    from imagebuild.engine import connect
    from imagebuild.oci import resolve_auth
    from imagebuild.push import push_plan
    results = push_plan(plan, client=connect("push"), auth_for=lambda reg: resolve_auth(reg))
"""

from imagebuild.push.failures import PushAuthError, PushError, classify
from imagebuild.push.publish import Vouch, gate, push_plan, result_for
from imagebuild.push.pusher import (
    DEFAULT_RETRIES,
    Pusher,
    SignIndex,
    SignPushed,
)
from imagebuild.push.skopeo import COMPRESSIONS, DEFAULT_COMPRESSION

__all__ = [
    "COMPRESSIONS", "DEFAULT_COMPRESSION",
    "DEFAULT_RETRIES", "PushAuthError", "PushError", "Pusher", "SignIndex", "SignPushed", "Vouch", "classify", "gate",
    "push_plan", "result_for",
]
