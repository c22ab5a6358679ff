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

Masking works on VALUES, never on serialised structure (issue 39): `redact` takes one free-text line or one string
value, `mask_tree` the string values inside a dict/list (keys, numbers, booleans and null untouched) before it is
serialised. A registered secret is masked wherever it occurs in a string, except strictly inside a hash (an
`sha256:<hex>` digest, an `sha256-<hex>` cosign tag, a bare hex run of 16 or more) or an RFC 3339 time: those are
never secret-bearing, so the password `sha256`, `2026`, or one that happens to be a fragment of a digest, leaves
every image ID, digest, inputs hash and date intact (a value that IS the whole secret is masked all the same).
A password of fewer than 4 characters is not masked inside text (every `a`, `:` or `{` would go, and it keeps
nothing secret anyway): only a value that is exactly it is masked. A URL's userinfo is masked as a unit whatever its
length.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

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
_SHORT: set[str] = set()  # secrets under 4 characters: masked only where a whole value IS one (module docstring)
MASK = "***"


def register_secret(value: str | None) -> None:
    if value and len(value) >= 4:
        _SECRETS.add(value)
    elif value:
        _SHORT.add(value)


def _mask_userinfo(m: re.Match[str]) -> str:
    user, sep, _ = m["userinfo"].partition(":")
    if not sep:  # token-only: the whole userinfo is the secret
        return f"{m['scheme']}{MASK}@"
    return f"{m['scheme']}{user}:{MASK}@"


# never a secret's home: a hash (an algorithm-prefixed digest `sha256:…`, cosign's `sha256-….sig`, the report's
# 12-hex short form, or a bare hex run as long as the tool's shortest keys, 16) and an RFC 3339 time (the record's
# dates: a numeric password must not turn `2026-…` into a date the record's reader refuses)
_HASH = re.compile(r"(?<![0-9A-Za-z])(?:(?:sha1|sha256|sha384|sha512|md5)[:-][0-9a-f]{12,}|[0-9a-f]{16,}"
                   r"|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:Z|[+-][0-9]{2}:[0-9]{2}))"
                   r"(?![0-9a-z])")


def _mask_secret(text: str, secret: str) -> str:
    """`text` with every occurrence of `secret` masked, except one lying wholly inside a hash or date that is not the
    secret itself. One that reaches across a hash's edge is masked whole, the edge with it: a secret ending in a long
    hex run (`tok-<hex>`) must not leave that run behind, and a leak is the worse error."""
    for _ in range(8):  # a mask can make a new occurrence only for a secret holding `*`: a few rounds at most
        hashes = [m.span() for m in _HASH.finditer(text) if m.group() != secret]
        hide = [False] * len(text)
        pos = text.find(secret)
        while pos != -1:
            end = pos + len(secret)
            if not any(a <= pos and end <= b for a, b in hashes):
                hide[pos:end] = [True] * (end - pos)
            pos = text.find(secret, pos + 1)
        if not any(hide):
            return text
        out, i = [], 0
        while i < len(text):
            if hide[i]:
                while i < len(text) and hide[i]:
                    i += 1
                out.append(MASK)
            else:
                out.append(text[i])
                i += 1
        text = "".join(out)
    return MASK  # did not settle: the whole value goes (fail closed)


def redact(text: str | None) -> str:
    """One free-text line or one string value with its credentials masked (the module docstring). Never give it a
    serialised document: use `mask_tree` on the values before serialising."""
    if not text:
        return text or ""
    if text in _SHORT:
        return MASK
    out = _USERINFO.sub(_mask_userinfo, text)
    out = _QUERY_SECRET.sub(lambda m: m["lead"] + MASK, out)
    for secret in sorted(_SECRETS, key=len, reverse=True):
        if secret in out:
            out = _mask_secret(out, secret)
    return out


# fields the tool fills from its own fixed words (a build's or a push's status, a run's steps and command): they
# decide what a report says (JUnit's failures, which suites exist), so a password `failed` or `test` must not turn
# a failed build into a passing one; kept as they are while they are one plain word
VOCABULARY = frozenset({"status", "steps", "command"})
_WORD = re.compile(r"[a-z][a-z0-9-]{0,31}")


def mask_tree(obj: Any, _key: str | None = None) -> Any:
    """`obj` (JSON-like) with `redact` applied to every string VALUE: keys, numbers, booleans and null are structure
    and stay as they are, so masking can never change a document's shape or its hashes; so do the plain words of
    the VOCABULARY fields."""
    if isinstance(obj, str):
        return obj if _key in VOCABULARY and _WORD.fullmatch(obj) else redact(obj)
    if isinstance(obj, dict):
        return {k: mask_tree(v, k) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [mask_tree(v, _key) for v in obj]
    return obj


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
