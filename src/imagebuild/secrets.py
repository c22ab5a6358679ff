"""Keep credentials out of logs, reports and images.

`redact` hides `user:password@` in URLs and any value registered with `register_secret` (registry passwords,
proxy credentials read from the environment).
"""

from __future__ import annotations

import re

_URL_CREDS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]+):(?P<pw>[^@/\s]+)@")
_SECRETS: set[str] = set()


def register_secret(value: str | None) -> None:
    if value and len(value) >= 4:
        _SECRETS.add(value)


def redact(text: str | None) -> str:
    if not text:
        return text or ""
    out = _URL_CREDS.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    for secret in sorted(_SECRETS, key=len, reverse=True):
        out = out.replace(secret, "***")
    return out


def has_credentials(url: str | None) -> bool:
    return bool(url and _URL_CREDS.search(url))
