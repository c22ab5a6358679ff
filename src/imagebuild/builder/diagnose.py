"""What a failed build step's output says went wrong, in words a user acts on: shared by every backend.

A backend knows which step failed and feeds that step's output lines here, as they arrive (the classic builder: its
one stream; BuildKit: each vertex its own `Diagnosis`, since parallel stages interleave). What is recognised:

- pip `--require-hashes` refusing a file whose sha256 is not the lock's:
      ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. ...
          six==1.17.0 from https://files.pythonhosted.org/.../six-1.17.0-py2.py3-none-any.whl#sha256=...:
              Expected sha256 0000...
                   Got        4721...
- apt-get install name=version for a version the mirror no longer has (a lock older than the mirror):
      E: Version '4:12.2.0-2' for 'gcc' was not found

`summary(step)` is the finding first, then where ("Step 7/12" for the classic builder, "[pip 3/7]" for BuildKit);
None when nothing was recognised, so the backend says the step and the builder's own error instead.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field

_HASH_HEAD = "THESE PACKAGES DO NOT MATCH THE HASHES"
_HASH_FROM = re.compile(r"^\s+(?P<req>\S+) from (?P<url>\S+?)(?: \(from .*\))?:\s*$")  # pip 23: (from -r F (line N))
_HASH_EXPECTED = re.compile(r"^\s*(?:Expected sha256|or)\s+(?P<h>[0-9a-f]{64})\s*$")
_HASH_GOT = re.compile(r"^\s*Got\s+(?P<h>[0-9a-f]{64})\s*$")
_APT_VERSION = re.compile(r"^E: Version '(?P<v>[^']+)' for '(?P<p>[^']+)' was not found")


@dataclass
class HashMismatch:
    requirement: str  # "six==1.17.0"
    file: str  # the file name pip downloaded or read
    expected: list[str] = field(default_factory=list)  # sha256 in the lock
    got: str = ""  # sha256 of the file

    def __str__(self) -> str:
        return (f"{self.file} ({self.requirement}): the lock expects sha256 {' or '.join(self.expected) or '?'}, "
                f"the file has sha256 {self.got or '?'}")


@dataclass
class Diagnosis:
    """The findings in one step's output (or one stream's, for a builder that runs its steps one after another)."""

    hash_mismatches: list[HashMismatch] = field(default_factory=list)  # pip --require-hashes refusals
    apt_missing: list[str] = field(default_factory=list)  # "pkg=version" apt could not find
    _in_hashes: bool = False

    def feed(self, line: str) -> None:
        """One output line (ANSI codes already stripped)."""
        if _HASH_HEAD in line:
            self._in_hashes = True
            return
        if m := _APT_VERSION.match(line.strip()):
            self.apt_missing.append(f"{m['p']}={m['v']}")
            return
        if not self._in_hashes:
            return
        if m := _HASH_FROM.match(line):
            url = m["url"].split("#", 1)[0]
            name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1]) or url
            self.hash_mismatches.append(HashMismatch(requirement=m["req"], file=name))
        elif (m := _HASH_EXPECTED.match(line)) and self.hash_mismatches:
            self.hash_mismatches[-1].expected.append(m["h"])
        elif (m := _HASH_GOT.match(line)) and self.hash_mismatches:
            self.hash_mismatches[-1].got = m["h"]
        elif not line.startswith((" ", "\t")):
            self._in_hashes = False  # the block ended

    def summary(self, step: str) -> str | None:
        """The finding, then `step` (where it happened); None when the output held nothing recognised."""
        if self.hash_mismatches:
            return (f"pip refused {len(self.hash_mismatches)} file(s) whose sha256 is not the lock's: "
                    + "; ".join(str(m) for m in self.hash_mismatches) + f" ({step}, pip install --require-hashes)")
        if self.apt_missing:
            return (f"apt has no {', '.join(self.apt_missing)}: the lock's version is gone from the mirror "
                    f"(`imagebuild lock` refreshes it, a base snapshot keeps it) ({step}, apt-get install)")
        return None
