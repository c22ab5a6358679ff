"""Build args that are the same for every image of a run: proxies, CREATED (when asked for), REVISION; and the
dated args of one image (`dated_build_args`), which `build` and the bake export both take from here.

None of them is part of the inputs hash (they would make every run "changed"); proxies are passed as Docker's
predefined proxy ARGs only, so they never land in ENV or history. Any password or token in a URL is registered with
`imagebuild.secrets` so logs and error messages redact it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from datetime import datetime, timezone

from imagebuild.builder.options import BuildOptions
from imagebuild.dates import rfc3339
from imagebuild.secrets import register_url_credentials

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "FTP_PROXY", "ALL_PROXY")


def proxy_build_args(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Proxy settings as build args only (Docker's predefined ARGs: not persisted in ENV or history)."""
    source: Mapping[str, str] = os.environ if env is None else env
    out = {}
    for name in PROXY_VARS:
        for key in (name, name.lower()):
            value = source.get(key)
            if value:
                out[key] = value
                register_url_credentials(value)
    return out


def created_arg(options: BuildOptions) -> str | None:
    """CREATED for the whole run: the option ("now": the build time, in UTC), else None: each image gets its source
    date (sourcedate.py), so an unchanged rebuild writes the same label and reproduces the same image."""
    if not options.created:
        return None
    if options.created == "now":
        return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return options.created


def revision_arg(options: BuildOptions) -> str:
    """REVISION: the option, else the checkout's HEAD, else "unknown" (not a git checkout, no git)."""
    if options.revision:
        return options.revision
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def dated_build_args(epoch: int, created: str | None, revision: str) -> dict[str, str]:
    """SOURCE_DATE_EPOCH, CREATED and REVISION of one image built with source date `epoch` (sourcedate.py), the run's
    `created_arg` and `revision_arg`: CREATED is the source date unless the run asked for another. One home, because
    `build` (one_image.build_request) and the bake export (bake.py) must pass the same values, or a bake's image is
    not the image `build` makes from the same inputs and the next `build` rebuilds it."""
    return {"SOURCE_DATE_EPOCH": str(epoch), "CREATED": created or rfc3339(epoch), "REVISION": revision}
