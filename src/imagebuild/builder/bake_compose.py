"""The bake targets as a compose file (`docker buildx bake -f docker-bake.yml`): the form that keeps `network: host`.

buildx reads a compose file as bake targets (one service = one target): `build.additional_contexts` are the named
contexts (`target:<parent>` chains a child to the parent bake builds), `build.secrets` name top-level `secrets` that
read the environment at bake time (`environment: PIP_EXTRA_INDEX_URL`), `build.network: host` reaches the JSON form's
lost network, `build.x-bake.output` the target's output (compose has no key for it). Variables are compose
interpolation with the export's defaults inline (`${SOURCE_DATE_EPOCH:-...}`); a literal `$` is `$$`. Compose has no
groups: every service is in the default group, one is built by its name.
"""

from __future__ import annotations

import re
from typing import Any

_MARK = re.compile(r"\x00([A-Za-z0-9_]+)\x00")


def compose_esc(value: str) -> str:
    return str(value).replace("$", "$$")


def compose_var(name: str, default: str | None = None) -> str:
    """A variable reference as bake_document writes it for compose_document (expanded there with the variable's
    default); with `default` (escaped already), this use's own: `${NAME:-default}`."""
    if default is not None:
        return "${" + name + ":-" + default + "}"
    return f"\x00{name}\x00"


def compose_document(doc: dict[str, Any]) -> dict[str, Any]:
    """The compose form of a bake document made with `esc=compose_esc, var=compose_var` (bake.bake_document)."""
    defaults = {name: str(v.get("default", "")) for name, v in doc["variable"].items()}

    def expand(value: str) -> str:  # defaults were escaped for compose already (bake_document's esc)
        return _MARK.sub(lambda m: "${" + m[1] + ":-" + defaults.get(m[1], "") + "}", value)

    services: dict[str, dict[str, Any]] = {}
    secret_ids: dict[str, str] = {}
    for name, target in doc["target"].items():
        build: dict[str, object] = {
            "context": target["context"],
            "dockerfile": target["dockerfile"],
            "network": "host",  # engines without a bridge (--bridge=none): every RUN needs it
            "additional_contexts": {k: expand(v) for k, v in target["contexts"].items()},
            "args": {k: expand(v) for k, v in target["args"].items()},
            "labels": {k: expand(v) for k, v in target["labels"].items()},
            "tags": target["tags"],
        }
        if "platforms" in target:
            build["platforms"] = target["platforms"]
        if "output" in target:  # compose has no output key: bake reads it from its own extension
            build["x-bake"] = {"output": target["output"]}
        ids = []
        for spec in target.get("secret", []):
            fields = dict(part.split("=", 1) for part in spec.split(","))
            secret_ids[fields["id"]] = fields["env"]
            ids.append(fields["id"])
        if ids:
            build["secrets"] = ids
        services[name] = {"build": build}
    out: dict[str, object] = {"services": services}
    if secret_ids:
        out["secrets"] = {sid: {"environment": env} for sid, env in sorted(secret_ids.items())}
    return out
