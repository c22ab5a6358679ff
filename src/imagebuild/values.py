"""What a value read from a file someone can edit (a lock, a record) or from a registry claims to be, checked before
it is used: ONE home for each kind's syntax, so the lock reader, the record reader and the registry client agree.

Why here and not at the use: a lock's apt version reaches a RUN line (`apt-get install pkg=VERSION`), its pip
version a `--require-hashes` requirements file, a digest a `docker pull`, a date a label. A lock's content digest is a
plain hash anyone editing it can recompute, so "the seal matches" says nothing about the values: `1.0; touch /tmp/x #`
as an apt version, or a pip version holding a newline and `--index-url https://elsewhere/simple`, must be refused
where the file is read, naming the file, key and value, not discovered in a build log (or not at all).

Each check returns the value when it is what it claims to be and raises ValueProblem (a ValueError whose text says
what the value should be) when not; callers put the file, line and key in front.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from packaging.version import InvalidVersion, Version

from imagebuild.dates import parse_created


class ValueProblem(ValueError):
    """A value that is not what its key says it is; str(): `'<value>' is not <what> (<syntax>)`."""


MAX_VALUE = 256  # no version, name, hash or date is longer; a longer one is refused before any pattern runs


def _check(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not isinstance(value, str) or len(value) > MAX_VALUE or not pattern.fullmatch(value):
            raise ValueProblem(f"{_shown(value)} is not {what}")
        return value

    return check


def _shown(value: object) -> str:
    """The value as a message shows it: quoted, control characters escaped, long ones cut (one line, always)."""
    return repr(value[:80] + "…" if isinstance(value, str) and len(value) > 80 else value)


# Debian policy 5.6.12: [epoch:]upstream[-revision]; upstream starts with a digit and holds [A-Za-z0-9.+~-] (and ':'
# only with an epoch), the revision [A-Za-z0-9.+~]
_DEBIAN_VERSION = re.compile(r"(?:[0-9]+:[0-9][A-Za-z0-9.+~:-]*|[0-9][A-Za-z0-9.+~-]*)")
# Debian policy 5.6.1: lower case letters, digits, + - . ; at least two characters, starting alphanumeric
_DEBIAN_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+")
# PEP 508 names; PEP 440's normalised form has no whitespace (packaging also accepts one around it: not here)
_PROJECT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_PEP440_CHARS = re.compile(r"[A-Za-z0-9.+!_-]+")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_IMAGE_ID = re.compile(r"sha256:[0-9a-f]{1,64}")  # the engine's ID, or a unique prefix of it (what it also accepts)
# a wheel's file name as an index serves it (PEP 427; '%' for a URL-quoted local label: torch-2.13.0%2Bcpu-…)
_WHEEL_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!%-]*\.whl")

debian_version = _check(_DEBIAN_VERSION, "a Debian version ([epoch:]upstream[-revision]: digits first, then "
                                         "letters, digits and . + ~ - :)")
debian_package = _check(_DEBIAN_PACKAGE, "a Debian package name (lower case letters, digits, + - .)")
project_name = _check(_PROJECT_NAME, "a Python project name (PEP 508: letters, digits, . _ -)")
sha256_hex = _check(_SHA256, "a sha256 (64 lowercase hex digits)")
digest = _check(_DIGEST, "a digest (sha256: and 64 lowercase hex digits)")
image_id = _check(_IMAGE_ID, "an image ID (sha256: and lowercase hex digits)")
wheel_file = _check(_WHEEL_FILE, "a wheel file name (letters, digits, . _ + ! % -, ending .whl)")


def pep440_version(value: str) -> str:
    """A version pip reads as exactly one version (PEP 440, local label included: 2.13.0+cpu)."""
    if not isinstance(value, str) or len(value) > MAX_VALUE or not _PEP440_CHARS.fullmatch(value):
        raise ValueProblem(f"{_shown(value)} is not a PEP 440 version")
    try:
        Version(value)
    except InvalidVersion:
        raise ValueProblem(f"{_shown(value)} is not a PEP 440 version") from None
    return value


def rfc3339(value: str) -> str:
    """A date as RFC 3339 writes it (2026-01-01T00:00:00Z, fractional seconds and offsets allowed)."""
    if not isinstance(value, str) or len(value) > 64 or value != value.strip() or parse_created(value) is None:
        raise ValueProblem(f"{_shown(value)} is not an RFC 3339 date (like 2026-01-01T00:00:00Z)")
    return value


def plain_text(value: str, what: str = "a one-line text") -> str:
    """Text without control characters (a value that is only compared or shown, never run): one line, bounded."""
    if not isinstance(value, str) or len(value) > 4096 or re.search(r"[\x00-\x1f\x7f]", value):
        raise ValueProblem(f"{_shown(value)} is not {what} (control characters or too long)")
    return value
