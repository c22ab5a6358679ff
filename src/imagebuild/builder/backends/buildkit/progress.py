"""Parse `docker buildx build --progress=rawjson`: BuildKit's own solve-status messages, never the human TTY output.

buildx writes one JSON object per status update to stderr (pretty-printed over several lines, objects back to back):
`vertexes` (a build step: `digest`, `name` such as "[pip 3/7] RUN pip install ...", `started`, `completed`, `cached`,
`error`), `statuses` (transfer progress, ignored) and `logs` (`vertex`, `stream`, base64 `data`: the step's output).
Anything that is not JSON (buildx's own "ERROR: failed to solve: ..." line at the end) is plain text.

`RawJsonProgress` turns that into the seam's events (backend.py): a `step` when a vertex starts, a `line` per output
line (redacted; the whole output also goes to the image's log), and on failure the failing step, BuildKit's error and
the last lines that step printed. A vertex error is the failure only when buildx exits non-zero: BuildKit reports
tolerated problems (a registry cache not there yet) as vertex errors too. Parallel stages interleave: each vertex
keeps its own tail.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import json
import re
from collections import deque
from dataclasses import dataclass, field
from typing import IO, Any

from imagebuild.builder.backend import BuildEvent
from imagebuild.builder.diagnose import Diagnosis
from imagebuild.builder.logs import write_log
from imagebuild.phases import Phase
from imagebuild.secrets import redact

TAIL_LINES = 40
# "[stage-0 2/4] RUN ..." / "[pip 3/7] COPY ..." / "[internal] load build definition" / "[context base] ..."
_STEP_NAME = re.compile(r"^\[(?P<stage>[^\]]*?)\s*(?P<k>\d+)/(?P<n>\d+)\]\s*(?P<instr>.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# After the last Dockerfile step BuildKit may work for minutes (the CPU runtime: 2.5 min) with no step to show: it
# exports and re-timestamps the layers, writes the archive, imports/exports a registry cache. Its status ids (buildx
# 0.13.1, BuildKit 0.13) -> the phase a progress row shows; each phase once, in the order they start.
PHASES: tuple[tuple[str, str], ...] = (
    ("importing cache manifest", "importing the registry cache"),
    ("exporting layers", "exporting layers"),
    ("rewriting layers with source-date-epoch", "re-timestamping layers (SOURCE_DATE_EPOCH)"),
    ("exporting manifest", "exporting the image manifest"),
    ("sending tarball", "writing archive"),
    ("writing image", "writing the image"),
    ("unpacking to", "unpacking into the engine's store"),
    ("preparing build cache for export", "exporting the registry cache"),
    ("writing cache", "exporting the registry cache"),
)


# the status ids of the exporter's re-timestamping (rewrite-timestamp=true: the image's layers written again with
# every file dated SOURCE_DATE_EPOCH) and the vertex names of a registry cache's import and export
RETIMESTAMP_STATUS = "rewriting layers with source-date-epoch"
_CACHE_VERTEX = ("importing cache manifest", "exporting cache", "preparing build cache")
_EXPORT_VERTEX = ("exporting to ",)  # "exporting to image", "exporting to docker image format", "... oci image format"
NAME_MAX = 160  # a phase's name in the report: the step as BuildKit names it, cut here


def _when(value: object) -> float | None:
    """BuildKit's RFC 3339 time (nanoseconds, `Z`) as seconds since the epoch; None when absent or not one."""
    if not isinstance(value, str) or not value:
        return None
    text = value.replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:  # at most microseconds for fromisoformat: cut the fraction, keep the offset
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[:min(digits, 6)]}{rest[digits:]}"
    try:
        return _dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def span(intervals: list[tuple[float, float]]) -> float:
    """The seconds covered by `intervals` (overlaps counted once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


@dataclass
class _Times:
    """When a vertex (or a status) started first and completed last, and whether the build cache gave it."""

    started: float | None = None
    completed: float | None = None
    cached: bool = False

    def see(self, item: dict[str, Any]) -> None:
        start, end = _when(item.get("started")), _when(item.get("completed"))
        if start is not None and (self.started is None or start < self.started):
            self.started = start
        if end is not None and (self.completed is None or end > self.completed):
            self.completed = end
        self.cached = self.cached or item.get("cached") is True

    def interval(self) -> tuple[float, float] | None:
        if self.started is None or self.completed is None or self.completed < self.started:
            return None
        return (self.started, self.completed)


@dataclass
class _Vertex:
    name: str
    started: bool = False
    times: _Times = field(default_factory=_Times)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    partial: str = ""  # output not yet ended by a newline
    diagnosis: Diagnosis = field(default_factory=Diagnosis)  # what its output says went wrong (diagnose.py)


@dataclass
class RawJsonProgress:
    """State of one buildx build's rawjson stream. `feed()` text as it arrives, `finish()` once it ended."""

    log: IO[str] | None = None
    vertexes: dict[str, _Vertex] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # vertex digests in the order they started
    error: str | None = None  # BuildKit's error for the failing step, or buildx's own message
    failed_vertex: str | None = None
    vertex_error: tuple[str, str] | None = None  # the first vertex error (message, digest): the cause if buildx fails
    plain: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))  # non-JSON lines (buildx's own)
    phases: list[str] = field(default_factory=list)  # the phases after/beside the steps, as they started (PHASES)
    status_times: dict[str, _Times] = field(default_factory=dict)  # status id -> when it ran
    _buffer: str = ""

    @property
    def failed(self) -> bool:
        return self.error is not None

    def feed(self, text: str) -> list[BuildEvent]:
        """More stderr text -> events. Incomplete objects wait for the next call."""
        self._buffer += text
        decoder = json.JSONDecoder()
        events: list[BuildEvent] = []
        pos = 0
        buf = self._buffer
        while True:
            while pos < len(buf) and buf[pos].isspace():
                pos += 1
            if pos >= len(buf):
                break
            if buf[pos] == "{":
                try:
                    obj, end = decoder.raw_decode(buf, pos)
                except json.JSONDecodeError:
                    if "\n}" not in buf[pos:]:  # incomplete: wait for more text
                        break
                    obj, end = None, buf.index("\n}", pos) + 2  # malformed object: skip it
                pos = end
                if isinstance(obj, dict):
                    events += self._status(obj)
                continue
            newline = buf.find("\n", pos)
            if newline < 0:
                break
            events += self._plain(buf[pos:newline])
            pos = newline + 1
        self._buffer = buf[pos:]
        return events

    def finish(self, returncode: int) -> list[BuildEvent]:
        """The process ended with `returncode`; a non-zero code without a BuildKit error still fails the build."""
        events: list[BuildEvent] = []
        if self._buffer.strip():
            events += self._plain(self._buffer)
        self._buffer = ""
        if returncode != 0 and self.error is None:
            if self.vertex_error is not None:
                self.error, self.failed_vertex = self.vertex_error
            else:
                last = next((ln for ln in reversed(self.plain) if ln.strip()), "")
                self.error = last.removeprefix("ERROR: ") or f"docker buildx build exited with status {returncode}"
        return events

    def fail(self, message: str) -> None:
        """A failure seen outside the stream (interrupted, lost, timed out); the first failure wins."""
        if self.error is None:
            self.error = message

    # -- reporting -------------------------------------------------------------------------------------------------
    def failure_summary(self) -> str:
        """One paragraph: what the failing step's output says went wrong (diagnose.py: a pip hash refusal, an apt
        version gone) and where, else the failing step, then BuildKit's reason."""
        if self.error is None:
            return ""
        vertex = self.vertexes.get(self.failed_vertex or "")
        where = vertex.name if vertex else (self._last_step() or "before the first Dockerfile step")
        if vertex is not None:
            step = where.split("]", 1)[0] + "]" if where.startswith("[") else where  # "[pip 3/7]": finding first
            found = vertex.diagnosis.summary(step)
            if found:
                return found
        return f"{where}: {self.error}"

    def tail_text(self) -> str:
        """The failing step's last lines (parallel stages each keep their own), else buildx's own lines."""
        vertex = self.vertexes.get(self.failed_vertex or "")
        lines = list(vertex.tail) if vertex and vertex.tail else list(self.plain)
        return "\n".join(lines)

    def timed_phases(self) -> list[Phase]:
        """Where the build's time went, from BuildKit's own times (phases.py): the preparation (definition,
        metadata, context) as one span, each Dockerfile step in the order it started (cached or not), the registry
        cache, the export and its re-timestamping (the rewrite's span, taken out of the export's)."""
        prepare: list[tuple[float, float]] = []
        export: list[tuple[float, float]] = []
        cache: list[tuple[float, float]] = []
        steps: list[Phase] = []
        for digest in self.order:
            vertex = self.vertexes[digest]
            interval = vertex.times.interval()
            m = _STEP_NAME.match(vertex.name)
            if m and not vertex.name.startswith(("[internal]", "[context ", "[auth]")):
                kind = "resolve" if m["stage"] == "resolve" else "step"
                seconds = None if interval is None else interval[1] - interval[0]
                steps.append(Phase(kind, vertex.name[:NAME_MAX], seconds, vertex.times.cached))
            elif interval is None:
                continue
            elif vertex.name.startswith(_EXPORT_VERTEX):
                export.append(interval)
            elif vertex.name.startswith(_CACHE_VERTEX):
                cache.append(interval)
            else:  # [internal] load build definition/.dockerignore/metadata, [context ...], [auth], transfers
                prepare.append(interval)
        rewrite = [i for sid, t in self.status_times.items()
                   if sid.startswith(RETIMESTAMP_STATUS) and (i := t.interval()) is not None]
        out: list[Phase] = []
        if prepare:
            out.append(Phase("prepare", "build definition, metadata, context", span(prepare)))
        out += steps
        if cache:
            out.append(Phase("cache", "registry cache import/export", span(cache)))
        if export:
            out.append(Phase("export", "exporting the image (layers, manifest, config, unpack/archive)",
                             max(0.0, span(export) - span(rewrite))))
        if rewrite:
            out.append(Phase("retimestamp", "rewriting layers with SOURCE_DATE_EPOCH", span(rewrite)))
        return out

    # -- internals -------------------------------------------------------------------------------------------------
    def _last_step(self) -> str:
        for digest in reversed(self.order):
            if _STEP_NAME.match(self.vertexes[digest].name):
                return self.vertexes[digest].name
        return ""

    def _status(self, obj: dict[str, Any]) -> list[BuildEvent]:
        events: list[BuildEvent] = []
        for v in obj.get("vertexes") or []:
            if isinstance(v, dict):
                events += self._vertex(v)
        for status in obj.get("statuses") or []:
            if isinstance(status, dict):
                sid = str(status.get("id", ""))
                self.status_times.setdefault(sid, _Times()).see(status)
                events += self._phase(sid)
        for entry in obj.get("logs") or []:
            if isinstance(entry, dict):
                events += self._log(entry)
        return events

    def _phase(self, status_id: str) -> list[BuildEvent]:
        """A status that starts a phase with no Dockerfile step of its own: a `step` event without a number."""
        phase = next((name for prefix, name in PHASES if status_id.startswith(prefix)), None)
        if phase is None or phase in self.phases:
            return []
        self.phases.append(phase)
        self._write(f"#{len(self.order)} {phase}\n")
        return [BuildEvent("step", phase)]

    def _vertex(self, v: dict[str, Any]) -> list[BuildEvent]:
        digest, name = str(v.get("digest", "")), redact(str(v.get("name", "")))
        vertex = self.vertexes.setdefault(digest, _Vertex(name=name))
        vertex.times.see(v)
        events: list[BuildEvent] = []
        if v.get("started") and not vertex.started:
            vertex.started = True
            self.order.append(digest)
            m = _STEP_NAME.match(name)
            if m:
                cached = " (cached)" if v.get("cached") else ""
                self._write(f"#{len(self.order)} {name}{cached}\n")
                events.append(BuildEvent("step", f"{m['stage']}: {m['instr']}" if m["stage"] else m["instr"],
                                         int(m["k"]), int(m["n"])))
        if v.get("error"):
            # not yet the build's failure: BuildKit reports what it tolerates as vertex errors too (a registry cache
            # to import that does not exist yet, an export with ignore-error=true) and buildx then exits 0. Only a
            # non-zero exit makes the first failing vertex the cause (finish); the rest are cancelled with it.
            message = redact(str(v["error"]))
            self._write(f"#{len(self.order)} ERROR: {message}\n")
            if self.vertex_error is None:
                self.vertex_error = (message, digest)
            events.append(BuildEvent("line", f"{name}: {message}"))
        return events

    def _log(self, entry: dict[str, Any]) -> list[BuildEvent]:
        vertex = self.vertexes.setdefault(str(entry.get("vertex", "")), _Vertex(name=""))
        try:
            data = base64.b64decode(str(entry.get("data", "")), validate=True).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            return []
        *lines, vertex.partial = (vertex.partial + data).split("\n")
        events: list[BuildEvent] = []
        for raw in lines:
            line = redact(_ANSI.sub("", raw.rstrip("\r").rsplit("\r", 1)[-1]))
            self._write(line + "\n")
            if line.strip():
                vertex.tail.append(line)
                vertex.diagnosis.feed(line)
                events.append(BuildEvent("line", line))
        return events

    def _plain(self, raw: str) -> list[BuildEvent]:
        line = redact(_ANSI.sub("", raw.rstrip()))
        if not line:
            return []
        self._write(line + "\n")
        self.plain.append(line)
        return [BuildEvent("line", line)]

    def _write(self, text: str) -> None:
        write_log(self.log, text)
