"""Parse the decoded JSON stream of the classic builder (`ImageStore.build(...).chunks()`); used by build.py.

The engine answers HTTP 200 and reports a failed build as `{"error": ..., "errorDetail": {...}}` chunks in the
stream (recognised by `engine.stream.error_text`, the one reader of such chunks): a tool that only looks at the HTTP
status reports green on a failed build. `BuildStream` turns every chunk
into state (current step, image ID, failure), keeps the last lines for the error report and writes the whole output,
redacted, to a log file.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from imagebuild.builder.backend import BuildEvent
from imagebuild.builder.diagnose import Diagnosis
from imagebuild.builder.logs import write_log
from imagebuild.engine.stream import error_code, error_text
from imagebuild.phases import Phase
from imagebuild.secrets import redact

TAIL_LINES = 40
_STEP = re.compile(r"^Step (?P<k>\d+)/(?P<n>\d+) : (?P<instr>.*)$")
_RUNNING_IN = re.compile(r"^ ---> Running in (?P<cid>[0-9a-f]{12,64})\s*$")
_STEP_IMAGE = re.compile(r"^ ---> (?P<iid>[0-9a-f]{12,64})\s*$")  # the image a step committed (or the cache gave)
_SUCCESS = re.compile(r"^Successfully built (?P<id>[0-9a-f]{12,64})\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_USING_CACHE = re.compile(r"^ ---> Using cache\s*$")
_FROM_AS = re.compile(r"^FROM\s.*\sAS\s+(?P<stage>\S+)\s*$", re.IGNORECASE)
NAME_MAX = 160  # a phase's name in the report: "Step 12/40 : RUN ...", cut here


@dataclass
class _Timing:
    """The classic builder's steps timed as their lines arrive: a step runs from its `Step N/M` line to the
    ` ---> <image ID>` line that commits it (or the next step); the stage is the last `FROM ... AS <name>`."""

    clock: Callable[[], float]
    began: float | None = None  # when the request was sent (the context upload starts)
    first_step: float | None = None
    stage: str = ""
    open: tuple[str, str, float] | None = None  # (stage, "Step k/n : instr", started)
    cached: bool = False
    cacheable: bool = True
    last_end: float | None = None
    ended: float | None = None
    steps: list[Phase] = field(default_factory=list)

    def step(self, text: str, instr: str) -> None:
        now = self.clock()
        self.close(now)
        if self.first_step is None:
            self.first_step = now
        m = _FROM_AS.match(instr)
        if m:
            self.stage = m["stage"]
        elif instr.upper().startswith("FROM "):
            self.stage = ""
        self.open, self.cached = (self.stage, text, now), False
        self.cacheable = not instr.upper().startswith(("FROM ", "ARG "))  # the build cache has no say in these

    def close(self, now: float) -> None:
        if self.open is None:
            return
        stage, text, started = self.open
        self.steps.append(Phase("resolve" if stage == "resolve" else "step", text[:NAME_MAX],
                                max(0.0, now - started), self.cached if self.cacheable else None))
        self.open, self.last_end = None, now

    def phases(self, built: bool) -> list[Phase]:
        out: list[Phase] = []
        if self.began is not None and self.first_step is not None:
            out.append(Phase("prepare", "sending the build context", max(0.0, self.first_step - self.began)))
        out += self.steps
        if built and self.ended is not None and self.last_end is not None and self.open is None:
            out.append(Phase("export", "tagging (each classic step committed its own layer)",
                             max(0.0, self.ended - self.last_end)))
        return out


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
    diagnosis: Diagnosis = field(default_factory=Diagnosis)  # pip hash refusals, apt versions gone (diagnose.py)
    clock: Callable[[], float] = time.monotonic  # when each line arrived (tests: a recorded stream's times)
    _partial: str = ""

    def __post_init__(self) -> None:
        self.tail = deque(maxlen=self.tail_lines)
        self.timing = _Timing(self.clock)

    def begin(self) -> None:
        """The request is about to be sent: the context upload's time counts from here."""
        self.timing.began = self.clock()

    def timed_phases(self) -> list[Phase]:
        """Where the build's time went (phases.py): the context upload, each step (cached or not, the `resolve`
        stage's as resolve), the tagging after the last step; a failed build's as far as it got."""
        return self.timing.phases(built=not self.failed)

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
        now = self.clock()
        if self.timing.ended is None:
            self.timing.close(now)
            self.timing.ended = now
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
        return self.diagnosis.summary(step) or f"{where}: {self.error}"

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
                self.timing.step(self.step_text, m["instr"])
                events.append(BuildEvent("step", m["instr"], self.step, self.steps))
                continue
            self.diagnosis.feed(line)
            if _USING_CACHE.match(line):
                self.timing.cached = True
            m = _STEP_IMAGE.match(line)
            if m:
                self.step_images.append(m["iid"])
                self.timing.close(self.clock())  # the step's image is committed (or the cache gave it)
            m = _RUNNING_IN.match(line)
            if m:
                self.containers.append(m["cid"])
                events.append(BuildEvent("container", m["cid"]))
            m = _SUCCESS.match(line)
            if m and not self.image_id:
                self.image_id = m["id"]
            events.append(BuildEvent("line", line))
        return events

    def _write(self, text: str) -> None:
        write_log(self.log, text)

