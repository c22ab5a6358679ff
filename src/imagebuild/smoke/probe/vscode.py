"""dev flavor, images built with `vscode:`: code-server's version is the image's pin (/etc/imagebuild/code-server.json,
written from compat/data/code_server.yaml at build time) and so is its Node's; code-server starts on a loopback port
within its time budget, serves `/` after a login with its password and sends a request without it to the login page
(codeserver.CodeServer). A dev image without VS Code (no pin, no code-server) skips both, saying so."""

from __future__ import annotations

import json
import os
import subprocess

from probe.codeserver import CODE_SERVER_DEFAULT, CODE_SERVER_PIN, CodeServer, code_server_version
from probe.common import Probe, which

START_BUDGET = 60.0  # seconds for code-server to answer (measured: a few seconds on 2 cores)


def read_pin(path=CODE_SERVER_PIN):
    """The image's pin as a dict, None when the image has none, {"error": ...} when it cannot be read."""
    try:
        with open(path) as fh:
            pin = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"error": f"{path}: {exc}"}
    return pin if isinstance(pin, dict) else {"error": f"{path}: not a JSON object"}


def find_code_server():
    found = which("code-server")
    if found:
        return found
    return CODE_SERVER_DEFAULT if os.path.isfile(CODE_SERVER_DEFAULT) and os.access(CODE_SERVER_DEFAULT, os.X_OK) \
        else None


def run(p: Probe, pin_path=CODE_SERVER_PIN):
    pin, exe = read_pin(pin_path), find_code_server()
    p.doc["vscode"] = {"pin": pin, "code_server": exe}
    if pin is None and exe is None:
        why = "no VS Code in this image (the matrix does not set `vscode:`)"
        p.check("vscode.version", "skipped", why)
        p.check("vscode.serves", "skipped", why)
        return
    if exe is None:
        why = f"{pin_path} pins code-server {pin.get('code-server')!r}, but no code-server on PATH or at " \
              f"{CODE_SERVER_DEFAULT}"
        p.check("vscode.version", "failed", why)
        p.check("vscode.serves", "failed", why)
        return
    _version(p, pin, exe, pin_path)
    server = CodeServer(exe)
    server.start()
    try:
        res = server.check(timeout=p.remaining(START_BUDGET))
    finally:
        server.stop()
    p.doc["vscode"]["serves"] = res
    p.check("vscode.serves", res["status"], res["reason"], **res.get("figures", {}))


def _version(p: Probe, pin, exe, pin_path):
    if pin is None or "error" in pin:
        p.check("vscode.version", "failed", (pin or {}).get("error") or f"{exe} is in the image, but no {pin_path} "
                "says which release it should be", code_server=exe)
        return
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=p.remaining(60))
    except (OSError, subprocess.SubprocessError) as exc:
        p.check("vscode.version", "failed", f"{exe} --version: {type(exc).__name__}: {exc}", code_server=exe)
        return
    found = code_server_version(out.stdout)
    node = _node_version(exe)
    want, want_node = pin.get("code-server"), pin.get("node")
    fig = {"code_server": exe, "found": found, "expected": want, "node": node, "expected_node": want_node}
    if out.returncode != 0 or found is None:
        p.check("vscode.version", "failed", f"{exe} --version exited {out.returncode}: "
                f"{(out.stdout + out.stderr).strip()[-400:]}", **fig)
    elif found != want:
        p.check("vscode.version", "failed", f"code-server is {found}, the image pins {want}", **fig)
    elif want_node and node != want_node:
        p.check("vscode.version", "failed", f"code-server's node is {node}, the image pins {want_node}", **fig)
    else:
        p.check("vscode.version", "passed", f"code-server {found} on node {node}, as pinned", **fig)


def _node_version(exe):
    """The version of the node beside code-server (its bin/node), without the `v`; None when there is none."""
    node = os.path.join(os.path.dirname(os.path.realpath(exe)), "node")
    if not os.path.isfile(node):
        return None
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().lstrip("v") or None
