"""The dev servers `imagebuild run` starts, and the real browser that meets them: one place for the integration
tests that reach them (test_run_dev.py, test_dev_clients.py, test_dev_vscode.py). No tests and no fixtures here
(fixtures live in conftest.py or the test module); imported as `from _servers import ...`.

- `Server`: `imagebuild run --jupyter/--ssh/--vscode ...` in the background; the lines it prints, each once its
  server answers; `stop()` sends SIGTERM, which removes the container.
- `run_containers`: the names of the containers `imagebuild run` made (their label), to check none is left.
- `need`: a missing client is a failure under `make test` (IMAGEBUILD_REQUIRE_ENGINE=1), a skip saying why elsewhere.
- `headless_chromium` / `shot`: Debian's chromium + chromium-driver driven by selenium, and its screenshots.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _helpers import ROOT

RUN_LABEL = "io.imagebuild.run"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def run_containers(client) -> set[str]:
    """The containers `imagebuild run` made that still exist (running or not)."""
    return {c.name for c in client.containers.list(all=True, filters={"label": RUN_LABEL})}


class Server:
    """`imagebuild run ARGS` in the background: the first `lines` lines it prints (a URL or an ssh command each,
    printed once that server's port answers; `line` is the first); stop() sends SIGTERM, which removes the container,
    and returns (exit status, stderr)."""

    def __init__(self, *args: str, lines: int = 1, env: dict | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "imagebuild", "run", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=ROOT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})})
        assert self.proc.stdout is not None
        # each readline blocks until that server answered (or the run failed and closed stdout)
        self.lines = [self.proc.stdout.readline().strip() for _ in range(lines)]
        if not all(self.lines):
            self.proc.wait(timeout=60)
            pytest.fail(f"no URL/command printed (of {lines}: {self.lines}): rc={self.proc.returncode} "
                        f"{self.proc.stderr.read()[-2000:] if self.proc.stderr else ''}")

    @property
    def line(self) -> str:
        return self.lines[0]

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        return code, self.proc.stderr.read() if self.proc.stderr else ""


def need(what: str, ok: bool) -> None:
    """A missing client: a failure under make test (IMAGEBUILD_REQUIRE_ENGINE=1), a skip saying why elsewhere."""
    if ok:
        return
    msg = f"{what} is not installed (scripts/system-deps.sh / make install)"
    if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


@contextlib.contextmanager
def headless_chromium(folder: Path) -> Iterator:
    """A selenium driver of Debian's headless chromium (its profile and chromedriver's log in `folder`); quit at the
    end. Fails or skips (`need`) without selenium, chromium or chromium-driver."""
    need("selenium", importlib.util.find_spec("selenium") is not None)
    need("chromium", Path(CHROMIUM).exists())
    need("chromium-driver", Path(CHROMEDRIVER).exists())
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900",
                f"--user-data-dir={folder / 'chromium-profile'}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER, log_output=str(folder / "chromedriver.log")),
                              options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver, folder: Path, name: str, min_size: int = 10_000) -> Path:
    """A screenshot of what the browser shows now, as folder/NAME.png; at least `min_size` bytes (a rendered page,
    not an empty frame)."""
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path)), path
    assert path.stat().st_size > min_size, (path, path.stat().st_size)
    return path
