"""Variant fields: what each may hold, and its normalised form.

A variant field can be written in `defaults`, as a `matrix` axis value, in an `include` row or an `exclude` row; it is
checked once where it is written, so an error points at that line. Checks here are value-local (type, grammar, a
known OS name); whether a combination works is resolve/'s job.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias, cast

from packaging.requirements import InvalidRequirement, Requirement

from imagebuild.backends import choices
from imagebuild.compat import Tables
from imagebuild.compat.gpus import ARCH_RE as GPU_ARCH_RE
from imagebuild.compat.gpus import load as load_gpus
from imagebuild.compat.gpus import name_of
from imagebuild.models import FLAVORS, PARENT_FLAVOR
from imagebuild.oci.reference import ReferenceSyntaxError, parse_reference
from imagebuild.secrets import has_credentials, redact, redact_url

TORCH_RE = re.compile(r"^\d+\.\d+(\.\d+)?$")
CUDA_RE = re.compile(r"^\d+\.\d+$")
PYTHON_RE = re.compile(r"^3\.\d{1,2}$")
PIN_RE = re.compile(r"^\d+(\.\d+){0,3}$")
URL_RE = re.compile(r"^(https?|file)://[^\s\"'`$\\]+$")
SNAPSHOT_RE = re.compile(r"^\d{8}T\d{6}Z$")
# Debian package names (policy §5.6.1), optionally `=version` or `:arch`; the text lands in a RUN line.
APT_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+(?::[a-z0-9-]+)?(?:=[A-Za-z0-9.+~:-]+)?$")
_PIP_FORBIDDEN = set("`$\\'\"\n\r")  # the requirement is quoted in a RUN line; these would break out of it


class Bad(Exception):
    """A value is wrong: message, valid choices, and a sub-path inside the value when that is more precise."""

    def __init__(self, message: str, choices: str = "", sub: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.message, self.choices, self.sub = message, choices, sub


# checker(value, raw_text, tables) -> normalised value (raises Bad); the value is whatever the YAML held
Checker: TypeAlias = Callable[[Any, str | None, Tables], Any]


def suggest(word: str, choices: Iterable[str]) -> str:
    """`did you mean 'torch'?` or the list of valid choices when nothing is close."""
    choices = list(choices)
    close = difflib.get_close_matches(str(word), choices, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return "valid choices: " + ", ".join(choices)


def describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"{redact(value)!r}"  # a URL's credentials never reach a message (secrets: the one rule)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def text_of(value: Any, raw: str | None) -> str | None:
    """A version written as a number (`cuda: 12.8`, `python: 3.10`) means its source text, not the float."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool) and raw is not None:
        return raw
    return None


def _version(value: Any, raw: str | None, regex: re.Pattern[str], example: str) -> str:
    text = text_of(value, raw)
    if text is None or not regex.match(text):
        raise Bad(f"expected a version like {example}, got {describe(value)}")
    return text


def _torch(value: Any, raw: str | None, tables: Tables) -> str:
    return _version(value, raw, TORCH_RE, '"2.9.1" (or "2.9" for the newest known patch)')


def _cuda(value: Any, raw: str | None, tables: Tables) -> str:
    if isinstance(value, str) and value.strip().lower() == "cpu":
        return "cpu"
    return _version(value, raw, CUDA_RE, '"12.8", "13.0" or "cpu"')


def _python(value: Any, raw: str | None, tables: Tables) -> str:
    return _version(value, raw, PYTHON_RE, '"3.12" (quote it: 3.10 unquoted is the number 3.1)')


def _os(value: Any, raw: str | None, tables: Tables) -> str:
    if not isinstance(value, str):
        raise Bad(f"expected an OS name, got {describe(value)}", "valid choices: " + ", ".join(tables.os))
    if value not in tables.os:
        valid = ", ".join(tables.os)
        hint = suggest(value, tables.os)
        choices = f"{hint} (valid choices: {valid})" if hint.startswith("did") else hint
        raise Bad(f"unknown OS {value!r}", choices)
    return value


def _pin(value: Any, raw: str | None, tables: Tables) -> str:
    return _version(value, raw, PIN_RE, '"9.10.2.21"')


def _version_or_false(value: Any, raw: str | None, tables: Tables) -> str | bool:
    if value is False:
        return False
    text = text_of(value, raw)
    if text is None or not PIN_RE.match(text):
        raise Bad(f"expected a version (quoted, like \"2.9\") or false, got {describe(value)}")
    return text


def _flavors(value: Any, raw: str | None, tables: Tables) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise Bad(f"expected a non-empty list of flavors, got {describe(value)}", "valid choices: base, runtime, dev")
    for i, item in enumerate(value):
        if item not in FLAVORS:
            raise Bad(f"unknown flavor {describe(item)}", suggest(str(item), FLAVORS), sub=(i,))
    chosen = set(value)
    for flavor in FLAVORS:  # every flavor builds FROM its parent, so the parent must be built too
        parent = PARENT_FLAVOR[flavor]
        if flavor in chosen and parent and parent not in chosen:
            raise Bad(f"{flavor!r} is built FROM {parent!r}, which is not listed", f"add {parent!r}")
    return tuple(f for f in FLAVORS if f in chosen)  # normalised order: base, runtime, dev


def _bool(value: Any, raw: str | None, tables: Tables) -> bool:
    if not isinstance(value, bool):
        raise Bad(f"expected true or false, got {describe(value)}")
    return value


def _string_list(value: Any, check: Callable[[str], str | None], what: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise Bad(f"expected a list of {what}, got {describe(value)}")
    out: list[str] = []
    for i, item in enumerate(value):
        reason = check(item) if isinstance(item, str) else f"expected a string, got {describe(item)}"
        if reason:
            raise Bad(reason, sub=(i,))
        out.append(item)
    return tuple(out)


def _apt_name(item: str) -> str | None:
    return None if APT_RE.match(item) else f"{item!r} is not a Debian package name (name[=version])"


def _pip_req(item: str) -> str | None:
    if not item.strip():
        return "empty requirement"
    if item.lstrip().startswith("-"):
        return f"{redact(item)!r} looks like a pip option; give requirements only"
    if set(item) & _PIP_FORBIDDEN:
        return f"{redact(item)!r} contains a quote, backslash, '$' or newline, which cannot be passed safely to pip"
    try:
        req = Requirement(item)
    except InvalidRequirement as exc:
        return f"{redact(item)!r} is not a pip requirement (PEP 508: {redact(str(exc).splitlines()[0])})"
    if req.url and has_credentials(req.url):
        return (f"{redact(item)!r} carries credentials in its URL, which would stay in the image; give the index "
                "with --pip-index-url/--pip-extra-index-url instead")
    return None


def _per_flavor(check: Callable[[str], str | None], what: str) -> Checker:
    def checker(value: Any, raw: str | None, tables: Tables) -> dict[str, tuple[str, ...]]:
        if not isinstance(value, dict):
            raise Bad(f"expected a mapping flavor -> list of {what}, got {describe(value)}",
                      "for example {dev: [...]}")
        out: dict[str, tuple[str, ...]] = {}
        for flavor, items in value.items():
            if flavor not in FLAVORS:
                raise Bad(f"unknown flavor {flavor!r}", suggest(str(flavor), FLAVORS), sub=(flavor,))
            try:
                out[flavor] = _string_list(items, check, what)
            except Bad as bad:
                raise Bad(bad.message, bad.choices, sub=(flavor, *bad.sub)) from None
        return out

    return checker


def _base_image(value: Any, raw: str | None, tables: Tables) -> str:
    if value == "bootstrap":
        return "bootstrap"
    if not isinstance(value, str):
        raise Bad(f"expected 'bootstrap' or an image reference, got {describe(value)}")
    try:
        return str(parse_reference(value))
    except ReferenceSyntaxError as exc:
        raise Bad(f"{value!r} is not a valid image reference: {exc}",
                  "'bootstrap' or e.g. ubuntu:24.04@sha256:<64 hex>, nvidia/cuda:12.8.1-base-ubuntu24.04") from None


def _url(value: Any, raw: str | None, tables: Tables) -> str:
    if not isinstance(value, str) or not URL_RE.match(value):
        shown = repr(redact_url(value)) if isinstance(value, str) else describe(value)
        hint = "percent-encode a space, quote, backslash or '$' in it (%20 %22 %5C %24)" \
            if isinstance(value, str) and re.match(r"(https?|file)://", value) else ""
        raise Bad(f"expected an http(s):// or file:// URL, got {shown}", hint)
    return value.rstrip("/")


def _index_url(value: Any, raw: str | None, tables: Tables) -> str:
    if isinstance(value, str) and value.lower() == "none":
        return "none"
    return _url(value, raw, tables)


def _snapshot(value: Any, raw: str | None, tables: Tables) -> str:
    if not isinstance(value, str) or not SNAPSHOT_RE.match(value):
        raise Bad(f"expected a snapshot timestamp like \"20251101T000000Z\", got {describe(value)}")
    return value


def _bootstrap_packages(value: Any, raw: str | None, tables: Tables) -> tuple[str, ...]:
    return _string_list(value, _apt_name, "Debian package names")


def _platforms(value: Any, raw: str | None, tables: Tables) -> tuple[str, ...]:
    """A list of OS/architecture pairs; a row of several platforms builds each (one tag, several platforms)."""
    known = tables.platform_names
    if isinstance(value, str):
        value = [value]  # `platforms: linux/arm64` means the one-element list
    if not isinstance(value, list) or not value:
        raise Bad(f"expected a non-empty list of platforms, got {describe(value)}", "valid choices: " + ", ".join(known))
    out: list[str] = []
    for i, item in enumerate(value):
        name = tables.platform(item)  # `arm64` is linux/arm64, as docker --platform reads it
        if name is None:
            raise Bad(f"unknown platform {describe(item)}", suggest(str(item), known), sub=(i,))
        if name in out:
            raise Bad(f"platform {name} is listed twice", sub=(i,))
        out.append(name)
    return tuple(out)


def _gpus(value: Any, raw: str | None, tables: Tables) -> tuple[str, ...]:
    """Target GPUs (compat/data/gpus.yaml names, any case: `H100`, `rtx-pro-6000`) or SASS archs (`sm_90`,
    `sm_90a`): normalised to the data's names and lower-case archs, in the file's order. `[]`: no target (a CPU
    row of a matrix whose `gpus:` names some)."""
    data = load_gpus()
    if isinstance(value, str):
        value = [value]  # `gpus: h100` means the one-element list
    if not isinstance(value, list):
        raise Bad(f"expected a list of GPUs, got {describe(value)}", "valid choices: " + data.choices())
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise Bad(f"expected a GPU name like 'h100' or an arch like 'sm_90', got {describe(item)}",
                      "valid choices: " + data.choices(), sub=(i,))
        gpu = data.lookup(item)
        arch = item.strip().lower()
        name = gpu.name if gpu else (arch if GPU_ARCH_RE.match(arch) else name_of(item))
        if gpu is None and GPU_ARCH_RE.match(name):
            if data.arch_range(name) is None:
                raise Bad(f"unknown GPU arch {item!r}", suggest(name, data.archs), sub=(i,))
        elif gpu is None:
            hint = suggest(name, data.gpus)
            raise Bad(f"unknown GPU {item!r}",
                      f"{hint} (valid choices: {data.choices()})" if hint.startswith("did") else
                      "valid choices: " + data.choices(), sub=(i,))
        if name in out:
            raise Bad(f"GPU {name!r} is listed twice", sub=(i,))
        out.append(name)
    return tuple(out)


def _vscode(value: Any, raw: str | None, tables: Tables) -> str | bool:
    """The dev flavor's code-server (compat/data/code_server.yaml): `true` is the data's default release, a version
    names one, `false` (the default) none. Its Node must be pinned for every platform an image can be built for."""
    from imagebuild.compat import code_server

    data = code_server.load()
    choices = "valid choices: true, false, " + ", ".join(f'"{v}"' for v in data.choices())
    if value is False:
        return False
    if value is True:
        return data.default
    text = text_of(value, raw)
    if text is None or not PIN_RE.match(text):
        raise Bad(f"expected true, false or a code-server version (quoted, like \"{data.default}\"), got "
                  f"{describe(value)}", choices)
    if text not in data.releases:
        raise Bad(f"unknown code-server version {text!r} ({code_server.DATA_FILE})", choices)
    missing = data.missing_node(text, tuple(tables.platform_names))
    if missing:
        raise Bad(f"code-server {text} needs Node {data.releases[text].node}, and {code_server.DATA_FILE} pins no "
                  f"Node {data.releases[text].node} build (npm's node-linux-<arch>) for {', '.join(missing)}",
                  choices)
    return text


def _backend(value: Any, raw: str | None, tables: Tables) -> str:
    names = choices()  # auto + THE table of backends (imagebuild/backends.py)
    if value not in names:
        raise Bad(f"unknown backend {describe(value)}", f"valid choices: {', '.join(names)}")
    return cast(str, value)  # one of the table's names (`in` does not narrow Any)


# field -> checker(value, raw_text, tables) -> normalised value (raises Bad)
VARIANT_FIELDS: dict[str, Checker] = {
    "torch": _torch,
    "cuda": _cuda,
    "python": _python,
    "os": _os,
    "cudnn": _pin,
    "nccl": _pin,
    "torchvision": _version_or_false,
    "torchaudio": _version_or_false,
    "transformer_engine": _version_or_false,
    "flavors": _flavors,
    "tf32": _bool,
    "apt_packages": _per_flavor(_apt_name, "Debian package names"),
    "pip_packages": _per_flavor(_pip_req, "pip requirements"),
    "base_image": _base_image,
    "mirror": _url,
    "snapshot": _snapshot,
    "bootstrap_packages": _bootstrap_packages,
    "torch_index_url": _index_url,
    "backend": _backend,  # how images are built: imagebuild/backends.py
    "platforms": _platforms,  # OS/architecture pairs, default linux/amd64 (compat/data/platforms.yaml)
    "gpus": _gpus,  # target GPUs or sm_XY archs (compat/data/gpus.yaml); the matrix-level `gpus:` when unset
    "vscode": _vscode,  # dev flavor: code-server, true/false/a version (compat/data/code_server.yaml)
}

REQUIRED_FIELDS = ("torch", "cuda", "os")  # python defaults to the OS's own python3


def check_field(name: str, value: Any, raw: str | None, tables: Tables) -> Any:
    return VARIANT_FIELDS[name](value, raw, tables)
