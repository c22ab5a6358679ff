"""Run one container in the foreground and always remove it: a command (with the caller's terminal when there is one,
else its output streamed), or a dev server (Jupyter/sshd) that is announced once its port answers and runs until
Ctrl-C/SIGTERM. Exit status: the command's, 1 when the container could not start or the server never answered."""

from __future__ import annotations

import os
import re
import select
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from imagebuild.engine import ContainerSettings, containers
from imagebuild.engine.containers import Interrupted, signals_raise  # noqa: F401  (Interrupted: callers catch it here)
from imagebuild.errors import ImagebuildError
from imagebuild.launch import devaccess

READY_TIMEOUT = 180.0  # seconds for Jupyter/sshd/code-server to answer (a first JupyterLab start builds its caches)
Echo = Callable[[str], None]


class StartFailed(ImagebuildError):
    """The engine refused to start the container (exit 1)."""


def _start(client: Any, settings: ContainerSettings, echo: Echo,
           before_start: Callable[[Any], None] | None = None) -> Any:
    extra: dict[str, Any] = {}
    container, err = containers.start(client, settings.kwargs(), extra, before_start)
    for note in extra.get("notes", []):
        echo(note)
    if container is None:
        raise StartFailed(f"could not start {settings.image}: {err}")
    return container


def _exit_code(container: Any) -> int:
    try:
        return int(container.wait().get("StatusCode", 1))
    except Exception:
        return 1


def run_command(client: Any, settings: ContainerSettings, echo: Echo) -> int:
    """The container's command in the foreground; its exit status. Removed on exit, Ctrl-C or SIGTERM."""
    container = None
    try:
        with signals_raise():
            if settings.tty:
                return _run_tty(client, settings, echo)
            holder: dict[str, Any] = {}

            def attach(created: Any) -> None:  # before the start, as `docker run` does: no output can be missed
                holder["stream"] = containers.attach_output(client, created.id)

            container = _start(client, settings, echo, attach)
            for out, err in holder["stream"]:
                for data, stream in ((out, sys.stdout), (err, sys.stderr)):
                    if data:
                        stream.buffer.write(data)
                        stream.flush()
            return _exit_code(container)
    finally:
        if container is not None:
            containers.remove(container)


def _run_tty(client: Any, settings: ContainerSettings, echo: Echo) -> int:
    """docker run -it: the caller's terminal in raw mode, wired to the container's through an attached socket (made
    before the start, so the first output is not lost), window size kept in step."""
    import termios
    import tty

    holder: dict[str, Any] = {}

    def attach(container: Any) -> None:
        holder["sock"] = containers.attach_terminal(client, container.id)

    container = _start(client, settings, echo, attach)
    sock = holder["sock"]
    raw = getattr(sock, "_sock", sock)
    fd_in, fd_out = sys.stdin.fileno(), sys.stdout.fileno()

    def resize(*_: Any) -> None:
        try:
            size = os.get_terminal_size(fd_out)
            containers.resize_terminal(client, container.id, size.lines, size.columns)
        except Exception:
            pass

    old_attrs = termios.tcgetattr(fd_in)
    old_winch = signal.signal(signal.SIGWINCH, resize)
    try:
        tty.setraw(fd_in, termios.TCSADRAIN)  # TCSAFLUSH (the default) would drop typed-ahead input
        resize()
        while True:
            ready, _, _ = select.select([raw, fd_in], [], [])
            if raw in ready:
                data = raw.recv(65536)
                if not data:
                    break
                os.write(fd_out, data)
            if fd_in in ready:
                data = os.read(fd_in, 65536)
                if not data:
                    break
                raw.sendall(data)
        return _exit_code(container)
    finally:
        termios.tcsetattr(fd_in, termios.TCSADRAIN, old_attrs)
        signal.signal(signal.SIGWINCH, old_winch)
        try:
            sock.close()
        except Exception:
            pass
        containers.remove(container)


def _logs_tail(container: Any, lines: int = 15) -> str:
    try:
        text = str(container.logs(tail=lines).decode(errors="replace")).strip()
    except Exception:
        return ""
    return text


def run_server(client: Any, settings: ContainerSettings, access: devaccess.Access, echo: Echo,
               ready_timeout: float = READY_TIMEOUT) -> int:
    """Jupyter/sshd/code-server (one, or several side by side): start, wait for each port, print each one's URL / ssh
    command on stdout (one line each, once it answers), stream the log to stderr until the container exits or the
    caller stops it (Ctrl-C, SIGTERM); the container is removed either way."""
    container = None
    try:
        with signals_raise():
            container = _start(client, settings, echo)
            deadline = time.monotonic() + ready_timeout
            for server in access.servers():
                while not devaccess.port_answers(server.port):
                    container.reload()
                    if container.status not in ("created", "running"):
                        tail = _logs_tail(container)
                        echo(f"error: {server.kind} exited before it answered on {devaccess.HOST}:{server.port}"
                             + (f"; its last output:\n{tail}" if tail else ""))
                        return 1
                    if time.monotonic() > deadline:
                        echo(f"error: {server.kind} did not answer on {devaccess.HOST}:{server.port} within "
                             f"{ready_timeout:.0f}s")
                        return 1
                    time.sleep(0.3)
                message = server.message
                if server.kind == "ssh":  # the login user as the container reported it
                    found = re.search(r"ssh login user: (\S+)", _logs_tail(container, 50))
                    if found:
                        message = re.sub(r"\S+@" + re.escape(devaccess.HOST), f"{found.group(1)}@{devaccess.HOST}",
                                         message)
                print(message, flush=True)
            what = " and ".join(s.kind for s in access.servers())
            echo(f"{what} {'are' if len(access.servers()) > 1 else 'is'} up in container {settings.name}; Ctrl-C "
                 "stops and removes it")
            for chunk in container.logs(stream=True, follow=True, since=int(time.time())):
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
            return 0
    except KeyboardInterrupt:
        echo(f"stopping {settings.name}")
        return 0
    finally:
        if container is not None:
            containers.remove(container)
