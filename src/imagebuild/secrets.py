"""Keep credentials out of logs, reports and images: ONE rule for what a credential in a URL is.

A URL's userinfo is a credential in every form: `user:password@`, token-only `TOKEN@`, password-only `:pw@`.
So is the value of a credential-like query parameter (`?token=`, `access_token=`, `password=`, `X-Amz-Signature=`,
...). On that one rule:
- `redact` hides them (and any value registered with `register_secret` / `register_url_credentials`: registry
  passwords, proxy and index credentials), `redact_host` the userinfo of a scheme-less `user:pw@host/path`;
- `has_credentials` says whether a URL carries any (render makes such an index URL a secret build arg);
- `strip_credentials` removes them, `split_userinfo` hands them over (the bootstrap moves them into apt's auth.conf,
  apt sends them as Basic auth, the preflight probes without them, bake leaves them for the caller to supply).
Every output — rendered Dockerfile comments, bake JSON, lock errors, registry messages, reports, records — goes
through these, so there is no second rule to fall out of step (tests/unit/test_secrets.py checks no module has one).
"""

from __future__ import annotations

import re
import urllib.parse

# scheme://USERINFO@HOST : people write passwords raw, so a userinfo may hold what RFC 3986 wants percent-encoded
# (`/`, `#`, `?`, `@`, `$`, `%`): `https://u:pa/s#w@host/simple`. The rule does not stop at the first `/`, then:
# - `user:password` form: a name without `/ ? # @ :`, a `:`, then anything but whitespace and `"`, up to the LAST `@`
#   (of that word) that is followed by a host ([name or IPv6][:port]) and the end of the host part. So
#   `https://host:8443/pypi@remote/simple` (a port, and an `@` in the path) reads as user `host`, password
#   `8443/pypi`: the same text as `https://user:1234/x@host/` with a password `1234/x`, and a leak is the worse error;
# - token form (`TOKEN@host`): no `/ ? # :` in it, `@` allowed (the last one before the host counts).
# An "@sha256:<hex>" is a digest (docker-image://debian:12@sha256:...), not a host. Masking more than the password
# when a credentialed URL also has an `@` in its path is the safe direction (messages only; nothing is built from a
# redacted URL).
_HOST_AHEAD = (r"(?![a-z0-9]+:[0-9a-f]{32})"
               r"(?=(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::[0-9]*)?"
               r"(?:[/?#\s\"'`,;)\]}>]|$))")
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)"
                       r"(?P<userinfo>[^/?#\s@:\"]*:[^\s\"]*|[^/?#\s@:\"]*(?:@[^/?#\s@:\"]*)*)@" + _HOST_AHEAD)
_SECRET_PARAMS = (
    "token", "access_token", "auth", "auth_token", "password", "passwd", "pwd", "secret", "client_secret", "api_key",
    "apikey", "key", "sig", "signature", "x-amz-signature", "x-amz-security-token", "x-goog-signature", "private_token",
)
_QUERY_SECRET = re.compile(
    r"(?P<lead>[?&;](?:" + "|".join(re.escape(p) for p in _SECRET_PARAMS) + r")=)(?P<value>[^&#\s;]+)",
    re.IGNORECASE,
)
_SECRETS: set[str] = set()
MASK = "***"


def register_secret(value: str | None) -> None:
    if value and len(value) >= 4:
        _SECRETS.add(value)


def _mask_userinfo(m: re.Match[str]) -> str:
    user, sep, _ = m["userinfo"].partition(":")
    if not sep:  # token-only: the whole userinfo is the secret
        return f"{m['scheme']}{MASK}@"
    return f"{m['scheme']}{user}:{MASK}@"


def redact(text: str | None) -> str:
    if not text:
        return text or ""
    out = _USERINFO.sub(_mask_userinfo, text)
    out = _QUERY_SECRET.sub(lambda m: m["lead"] + MASK, out)
    for secret in sorted(_SECRETS, key=len, reverse=True):
        out = out.replace(secret, MASK)
    return out


def redact_host(text: str) -> str:
    """A `[user[:pw]@]host[:port][/path]` value written without a scheme (a registry, a mirror host) with its userinfo
    masked like a URL's: the same rule, for the form `redact` cannot tell from `name@sha256:...`."""
    if "://" in text or "@" not in text:
        return redact(text)
    return redact("x://" + text)[len("x://"):]


def redact_url(url: str) -> str:
    """`url`, a value known to be ONE URL (an option's, a matrix field's), with its userinfo masked even when it is not
    a well-formed URL (a raw `"` or space in the password, which the rule above does not cross): then everything
    between `://` and its last `@` is masked. For messages about a value that is being refused."""
    out = redact(url)
    scheme, sep, rest = out.partition("://")
    if out != url or not sep or "@" not in rest:
        return out
    return f"{scheme}://{MASK}@{rest.rpartition('@')[2]}"


def register_url_credentials(text: str) -> None:
    """Register the secret part of every URL's userinfo in `text` (the password; for a token-only URL, the token),
    raw and percent-decoded, so a message that quotes it without its URL is redacted too."""
    for m in _USERINFO.finditer(text):
        user, sep, password = m["userinfo"].partition(":")
        secret = password if sep else user
        register_secret(secret)
        register_secret(urllib.parse.unquote(secret))


def has_credentials(url: str | None) -> bool:
    return bool(url and (_USERINFO.search(url) or _QUERY_SECRET.search(url)))


def strip_credentials(text: str) -> str:
    """`text` with every URL's userinfo removed and credential query values emptied (not masked: the result is used)."""
    out = _USERINFO.sub(lambda m: m["scheme"], text)
    return _QUERY_SECRET.sub(lambda m: m["lead"], out)


def split_userinfo(url: str) -> tuple[str, str, str]:
    """(url without userinfo, user, password) of one URL, percent-decoded; ("", "") when it has none. A token-only
    URL gives the token as the user (what HTTP Basic and apt's auth.conf expect)."""
    m = _USERINFO.search(url)
    if not m or m.start() != 0:
        return url, "", ""
    user, _, password = m["userinfo"].partition(":")
    return url[: m.start()] + m["scheme"] + url[m.end():], urllib.parse.unquote(user), urllib.parse.unquote(password)
