"""The dev image's servers as a person meets them, with real clients: `imagebuild run --jupyter`'s URL opened in
headless Chromium (Debian's chromium + chromium-driver, driven by selenium) shows JupyterLab's launcher, a notebook
cell `import torch; torch.__version__` shows the image's torch, a wrong token gets the login page and no lab; the
line `imagebuild run --ssh` prints, run as it is by OpenSSH's `ssh`, logs in and imports torch. Screenshots go to
the test's folder (printed). Every container is removed at the end (the run's SIGTERM), checked."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _helpers import cpu_image  # noqa: E402
from _servers import Server, headless_chromium, need, run_containers, shot  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.cpu_images("cpu_build")]
# the launcher's first card under its "Notebook" heading (the image's Python kernel)
NOTEBOOK_CARD = ("//div[contains(@class,'jp-Launcher-section')][.//*[contains(@class,'jp-Launcher-sectionTitle')]"
                 "[contains(., 'Notebook')]]//div[contains(@class,'jp-LauncherCard')]")
WAIT = 180  # seconds: a first JupyterLab start builds its caches, a first kernel start imports a lot


@pytest.fixture(scope="module")
def dev_image(request, client):
    return cpu_image(request, "dev")


@pytest.fixture
def chromium(tmp_path):
    with headless_chromium(tmp_path) as driver:
        yield driver


def test_jupyterlab_in_chromium_runs_torch_and_refuses_a_wrong_token(client, dev_image, chromium, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    report = tmp_path / "report"
    report.mkdir()
    torch_version = client.images.get(dev_image).labels["io.imagebuild.torch"]
    before = run_containers(client)
    t0 = time.monotonic()
    server = Server("--jupyter", "--no-workspace", dev_image)
    try:
        m = re.fullmatch(r"(http://127\.0\.0\.1:\d+)/lab\?token=([0-9a-f]{48})", server.line)
        assert m, server.line
        base, token = m.group(1), m.group(2)
        wrong = "0" * 48 if token != "0" * 48 else "1" * 48
        wait = WebDriverWait(chromium, WAIT)
        # a wrong token first, in a browser that holds no cookie yet: the login page, never the lab
        chromium.get(f"{base}/lab?token={wrong}")
        wait.until(ec.visibility_of_element_located((By.ID, "password_input")))
        assert "/login?" in chromium.current_url, chromium.current_url
        assert "Token authentication is enabled" in chromium.find_element(By.TAG_NAME, "body").text
        assert not chromium.find_elements(By.CSS_SELECTOR, ".jp-Launcher, .jp-LabShell")
        shot(chromium, report, "wrong-token")
        # the URL run printed: JupyterLab's launcher, as a person sees it
        chromium.get(server.line)
        card = wait.until(ec.element_to_be_clickable((By.XPATH, NOTEBOOK_CARD)))
        assert chromium.find_element(By.CSS_SELECTOR, ".jp-Launcher").is_displayed()
        shot(chromium, report, "launcher")
        # a new notebook on the image's kernel; one cell; its output is what the image's torch says
        card.click()
        editor = wait.until(ec.element_to_be_clickable(
            (By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell .cm-content")))
        editor.click()
        editor.send_keys("import torch; torch.__version__")
        editor.send_keys(Keys.SHIFT, Keys.ENTER)
        want = f"'{torch_version}"
        output = wait.until(lambda d: next((e for e in d.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output")
                                            if want in e.text), None))
        shot(chromium, report, "notebook")
        assert output.text.startswith(want), output.text  # '2.13.0+cpu'
        print(f"\njupyterlab in chromium: {time.monotonic() - t0:.1f}s, cell said {output.text}; screenshots in "
              f"{report}")
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert run_containers(client) == before


def test_the_printed_ssh_line_logs_in_and_imports_torch(client, dev_image, tmp_path):
    need("openssh-client (ssh, ssh-keygen)", bool(shutil.which("ssh") and shutil.which("ssh-keygen")))
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    torch_version = client.images.get(dev_image).labels["io.imagebuild.torch"]
    before = run_containers(client)
    server = Server("--ssh", "--ssh-key", f"{key}.pub", "--no-workspace", dev_image)
    try:
        line = shlex.split(server.line)
        assert line[0] == "ssh" and line[-1].endswith("@127.0.0.1"), server.line
        # the printed line as it is; only the key (not in ~/.ssh here) and no prompt are added, before the host
        argv = [*line[:-1], "-i", str(key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", line[-1],
                "python -c 'import torch; print(torch.__version__)'"]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip().split("+")[0] == torch_version, p.stdout
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert run_containers(client) == before
