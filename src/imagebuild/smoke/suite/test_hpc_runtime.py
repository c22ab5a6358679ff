"""The image as enroot/pyxis and Apptainer start it: an unknown UID/GID, no USER, a read-only root, an empty HOME
from outside and a hostile host environment (probe/hpcruntime.py; its checks are rows of probe/table.py, tested by
test_checks.py). The runner starts that side container (imagebuild.smoke.sides) and names it with --side hpc=NAME;
by hand:

    docker run -d --name x-hpc --read-only --tmpfs /tmp --tmpfs /home/researcher:uid=23456,gid=23456 \\
        --user 23456:23456 -e HOME=/home/researcher -e USER=researcher -e PYTHONPATH=/nope \\
        -e LD_LIBRARY_PATH=/nope -e CUDA_HOME=/nope -e PIP_INDEX_URL=http://pip.invalid IMAGE sleep infinity
    pytest --hosts=docker://x src/imagebuild/smoke/suite -k hpc --side hpc=x-hpc
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.section("hpc")


@pytest.fixture(scope="module")
def hpc_doc(smoke: Any) -> dict[str, Any]:
    """The hpc probe's JSON from the hpc side container (the suite's probe of the table's `hpc` place)."""
    doc: dict[str, Any] = smoke.place_doc("hpc")[0]
    return doc


def test_hpc_mode_is_real(hpc_doc: dict[str, Any], smoke: Any) -> None:
    """The container really ran as enroot/Apptainer would start it, else every other hpc check proves nothing."""
    facts = hpc_doc.get("hpc") or {}
    ident = facts.get("identity") or {}
    want = smoke.extra_probe("hpc")["user"]
    if want and f"{ident.get('uid')}:{ident.get('gid')}" != want:
        pytest.fail(f"the hpc probe ran as {ident.get('uid')}:{ident.get('gid')}, not {want}", pytrace=False)
    if ident.get("user") is not None:
        pytest.fail(f"uid {ident.get('uid')} has a passwd entry ({ident['user']}) in the image: not an unknown user",
                    pytrace=False)
    if not facts.get("root_read_only"):
        pytest.fail("the root filesystem was writable: not started read-only", pytrace=False)
    missing = [k for k in ("PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_HOME") if k not in (facts.get("host_env") or {})]
    if missing:
        pytest.fail(f"the hostile host environment lacks {', '.join(missing)}", pytrace=False)


@pytest.mark.asserts("hpc.te")
def test_hpc_te(hpc_doc: dict[str, Any], smoke: Any, check: Any) -> None:
    want = str(smoke.expected_value("transformer_engine") or "").strip().lower()
    c: dict[str, Any] = next((c for c in hpc_doc.get("checks", []) if c["name"] == "hpc.te"), {})
    if want not in ("", "none") and c.get("status") == "skipped":
        pytest.fail(f"transformer_engine {want} is planned but the hpc probe found none: {c.get('reason')}",
                    pytrace=False)
    check()
