"""Parse the decoded JSON stream of the classic builder (`ImageStore.build(...).chunks()`); used by build.py.

The engine answers HTTP 200 and reports a failed build as `{"error": ..., "errorDetail": {...}}` chunks in the
stream (recognised by `engine.stream.error_text`, the one reader of such chunks): a tool that only looks at the HTTP
status reports green on a failed build. `BuildStream` turns every chunk
into state (current step, image ID, failure), keeps the last lines for the error report and writes the whole output,
redacted, to a log file.
"""

from __future__ import annotations

import re
import urllib.parse
from collections import deque
from dataclasses import dataclass, field
from typing import IO

from imagebuild.builder.backend import BuildEvent
from imagebuild.builder.logs import write_log
from imagebuild.engine.stream import error_code, error_text
from imagebuild.secrets import redact

TAIL_LINES = 40
_STEP = re.compile(r"^Step (?P<k>\d+)/(?P<n>\d+) : (?P<instr>.*)$")
_RUNNING_IN = re.compile(r"^ ---> Running in (?P<cid>[0-9a-f]{12,64})\s*$")
_STEP_IMAGE = re.compile(r"^ ---> (?P<iid>[0-9a-f]{12,64})\s*$")  # the image a step committed (or the cache gave)
_SUCCESS = re.compile(r"^Successfully built (?P<id>[0-9a-f]{12,64})\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# pip --require-hashes refusing a file (the lock's sha256 is not the downloaded file's):
#   ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. ...
#       six==1.17.0 from https://files.pythonhosted.org/.../six-1.17.0-py2.py3-none-any.whl#sha256=...:
#           Expected sha256 0000...
#                Got        4721...
_HASH_HEAD = "THESE PACKAGES DO NOT MATCH THE HASHES"
_HASH_FROM = re.compile(r"^\s+(?P<req>\S+) from (?P<url>\S+?)(?: \(from .*\))?:\s*$")  # pip 23: (from -r F (line N))
_HASH_EXPECTED = re.compile(r"^\s*(?:Expected sha256|or)\s+(?P<h>[0-9a-f]{64})\s*$")
_HASH_GOT = re.compile(r"^\s*Got\s+(?P<h>[0-9a-f]{64})\s*$")
# apt-get install name=version for a version the mirror no longer has (a lock older than the mirror)
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
class BuildStream:
    """State of one build's output. Feed it every decoded chunk; read `.failed`, `.error`, `.image_id` at the end."""

    log: IO[str] | None = None
    tail_lines: int = TAIL_LINES
    step: int = 0
    steps: int = 0
    step_text: str = ""  # "Step 5/9 : RUN pip install ..."
    image_id: str | None = None
    error: str | None = None
    error_code: int | None = None
    containers: list[str] = field(default_factory=list)  # intermediate containers announced by the engine
    step_images: list[str] = field(default_factory=list)  # the image of each step, in order (short IDs)
    tail: deque[str] = field(default_factory=deque)
    hash_mismatches: list[HashMismatch] = field(default_factory=list)  # pip --require-hashes refusals
    apt_missing: list[str] = field(default_factory=list)  # "pkg=version" apt could not find
    _partial: str = ""
    _in_hashes: bool = False

    def __post_init__(self) -> None:
        self.tail = deque(maxlen=self.tail_lines)

    @property
    def failed(self) -> bool:
        return self.error is not None

    # -- feeding -------------------------------------------------------------------------------------------------
    def feed(self, chunk: object) -> list[BuildEvent]:
        """One decoded chunk (dict; str/bytes are treated as plain output) -> events."""
        if isinstance(chunk, bytes):
            chunk = chunk.decode("utf-8", "replace")
        if isinstance(chunk, str):
            return self._text(chunk)
        if not isinstance(chunk, dict):
            return []
        events: list[BuildEvent] = []
        if "stream" in chunk and chunk["stream"] is not None:
            events += self._text(str(chunk["stream"]))
        if chunk.get("status"):
            # pulls during FROM, import progress: keep them out of the tail unless they are final lines
            status = str(chunk["status"])
            line = f"{chunk.get('id', '')}: {status}".lstrip(": ") if chunk.get("id") else status
            if "progress" not in chunk:
                events += self._lines([line])
        aux = chunk.get("aux")
        if isinstance(aux, dict) and aux.get("ID"):
            self.image_id = str(aux["ID"])
            events.append(BuildEvent("image", self.image_id))
        message = error_text(chunk)
        if message is not None:
            self.fail(message, error_code(chunk))
            events.append(BuildEvent("error", self.error or message))
        return events

    def fail(self, message: str, code: int | None = None) -> None:
        """Record a failure (first one wins); the message is redacted and also goes to the log."""
        self.flush()
        message = redact(_ANSI.sub("", message)).strip()
        if self.error is None:
            self.error = message
            self.error_code = code if isinstance(code, int) else None
        self._write(f"ERROR: {message}\n")
        self.tail.append(f"ERROR: {message}")

    def finish(self) -> None:
        """Call when the stream ended: a stream without error and without an image ID is a failure too."""
        self.flush()
        if self.error is None and not self.image_id:
            self.fail("the build stream ended without an image ID (engine connection lost?)")

    def flush(self) -> None:
        if self._partial:
            text, self._partial = self._partial, ""
            self._lines([text])

    # -- reporting -----------------------------------------------------------------------------------------------
    def failure_summary(self) -> str:
        """One paragraph: failing step + reason."""
        if not self.failed:
            return ""
        where = self.step_text or "before the first Dockerfile step"
        step = where.split(" : ", 1)[0]  # "Step 15/39": the finding first, the long RUN line is in the log
        if self.hash_mismatches:
            return (f"pip refused {len(self.hash_mismatches)} file(s) whose sha256 is not the lock's: "
                    + "; ".join(str(m) for m in self.hash_mismatches) + f" ({step}, pip install --require-hashes)")
        if self.apt_missing:
            return (f"apt has no {', '.join(self.apt_missing)}: the lock's version is gone from the mirror "
                    f"(`imagebuild lock` refreshes it, a base snapshot keeps it) ({step}, apt-get install)")
        return f"{where}: {self.error}"

    def tail_text(self) -> str:
        return "\n".join(self.tail)

    # -- internals -----------------------------------------------------------------------------------------------
    def _text(self, text: str) -> list[BuildEvent]:
        data = self._partial + text
        *lines, self._partial = data.split("\n")
        # progress bars rewrite the line with \r: keep the last state
        return self._lines([ln.rstrip("\r").rsplit("\r", 1)[-1] for ln in lines])

    def _lines(self, lines: list[str]) -> list[BuildEvent]:
        events: list[BuildEvent] = []
        for raw in lines:
            line = redact(_ANSI.sub("", raw))
            self._write(line + "\n")
            if not line.strip():
                continue
            self.tail.append(line)
            m = _STEP.match(line)
            if m:
                self.step, self.steps = int(m["k"]), int(m["n"])
                self.step_text = line.strip()
                events.append(BuildEvent("step", m["instr"], self.step, self.steps))
                continue
            self._pip_apt(line)
            m = _STEP_IMAGE.match(line)
            if m:
                self.step_images.append(m["iid"])
            m = _RUNNING_IN.match(line)
            if m:
                self.containers.append(m["cid"])
                events.append(BuildEvent("container", m["cid"]))
            m = _SUCCESS.match(line)
            if m and not self.image_id:
                self.image_id = m["id"]
            events.append(BuildEvent("line", line))
        return events

    def _pip_apt(self, line: str) -> None:
        """Collect pip's hash refusals and apt's missing pinned versions (named in the failure summary)."""
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

    def _write(self, text: str) -> None:
        write_log(self.log, text)

