"""Runtime contract: non-root default user, venv, NVIDIA env, /dev/shm, no secrets in ENV, tini, WORKDIR."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.section("system")

GIB = 1 << 30


def test_default_user(probe: dict[str, Any], smoke: Any, figures: Callable[[dict[str, Any]], None]) -> None:
    u = probe["system"]["user"]
    figures(u)
    want = smoke.expected_value("user")
    if u["uid"] == 0:
        pytest.fail(f"user: expected non-root{' ' + want if want else ''}, found root (uid 0)", pytrace=False)
    if want and u.get("name") != want:
        found = u.get("name") or f"uid {u['uid']} without a passwd entry"
        pytest.fail(f"user: expected {want}, found {found}", pytrace=False)
    want_uid = smoke.expected_value("uid")
    if want_uid and str(u["uid"]) != str(want_uid):
        pytest.fail(f"uid: expected {want_uid}, found {u['uid']}", pytrace=False)


def test_venv(probe: dict[str, Any], smoke: Any, figures: Callable[[dict[str, Any]], None]) -> None:
    py = probe["system"]["python"]
    figures(py)
    want = smoke.expected_value("venv")
    if not want:
        pytest.skip("no venv expectation (not an imagebuild image, no --expect venv=)")
    if py["prefix"].rstrip("/") != want.rstrip("/") or not py["in_venv"]:
        pytest.fail(f"venv: expected {want}, found python {py['executable']} (prefix {py['prefix']})",
                    pytrace=False)


def test_nvidia_env(probe: dict[str, Any], smoke: Any, figures: Callable[[dict[str, Any]], None]) -> None:
    env = probe["system"]["env"]["nvidia"]
    figures(env)
    if smoke.cpu_variant():
        pytest.skip("CPU variant: nvidia-container-toolkit variables not needed")
    missing = [k for k, v in env.items() if not v]
    if missing:
        pytest.fail(f"not set in the image ENV: {', '.join(missing)}", pytrace=False)
    caps = env["NVIDIA_DRIVER_CAPABILITIES"]
    if caps != "all" and not {"compute", "utility"} <= set(caps.split(",")):
        pytest.fail(f"NVIDIA_DRIVER_CAPABILITIES={caps}: want compute,utility", pytrace=False)


def test_shm(probe: dict[str, Any], figures: Callable[[dict[str, Any]], None]) -> None:
    shm = probe["system"]["shm"]
    figures(shm)
    if not shm.get("bytes") or shm["bytes"] < GIB:
        pytest.fail(f"/dev/shm is {shm.get('bytes') or 0} bytes (< 1 GiB): NCCL and DataLoader workers fail; run "
                    f"with --ipc=host or --shm-size", pytrace=False)


def test_no_secrets_in_env(probe: dict[str, Any], figures: Callable[[dict[str, Any]], None]) -> None:
    found = probe["system"]["env"]["secret_names"]
    figures({"names": [f["name"] for f in found]})
    if found:
        pytest.fail("secret-looking ENV: " + ", ".join(f"{f['name']} ({f['why']})" for f in found), pytrace=False)


def test_image_config(smoke: Any, figures: Callable[[dict[str, Any]], None]) -> None:
    if not smoke.inspect:
        pytest.skip("no container config (not the docker backend)")
    cfg = smoke.inspect.get("Config") or {}
    got = {"entrypoint": " ".join(cfg.get("Entrypoint") or []), "workdir": cfg.get("WorkingDir") or "",
           "user": cfg.get("User") or ""}
    figures(got)
    bad = []
    want = smoke.expected_value("entrypoint")
    if want and want not in got["entrypoint"]:
        bad.append(f"entrypoint: expected {want}, found {got['entrypoint'] or 'none'}")
    want = smoke.expected_value("workdir")
    if want and got["workdir"] != want:
        bad.append(f"workdir: expected {want}, found {got['workdir'] or 'none'}")
    if not smoke.expected("entrypoint") and not smoke.expected("workdir"):
        pytest.skip("no entrypoint/workdir expectation (not an imagebuild image)")
    if bad:
        pytest.fail("; ".join(bad), pytrace=False)
