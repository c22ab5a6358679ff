"""locale: the image's environment names a UTF-8 locale that exists, and Python's preferred encoding is UTF-8.

The environment is read as the process was started with (/proc/self/environ): Python rewrites LC_CTYPE at startup
when the locale is C or POSIX (PEP 538 coercion), so os.environ would hide an image that sets LANG=C. Python's own
encoding check passes even then (coercion, UTF-8 mode): that is why the environment is checked on its own.
"""

from __future__ import annotations

import codecs
import locale
import os
import subprocess
import sys
from typing import Any

from probe.common import Probe, which
from probe.environ import environ_set

LOCALE_VARS = ("LC_ALL", "LC_CTYPE", "LANG")


def parse_environ(data: bytes) -> dict:
    """/proc/PID/environ (NUL-separated NAME=VALUE) -> dict."""
    out = {}
    for item in data.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def effective_ctype(env: dict) -> tuple[str | None, str]:
    """(variable, value) that decides LC_CTYPE: LC_ALL, then LC_CTYPE, then LANG (empty values do not count)."""
    for var in LOCALE_VARS:
        if env.get(var):
            return var, env[var]
    return None, ""


def is_utf8_name(name: str) -> bool:
    """`C.UTF-8`, `en_US.utf8`, `de_DE.UTF-8@euro` -> True; `C`, `POSIX`, `en_US`, `en_US.ISO-8859-1` -> False."""
    if "." not in name:
        return False
    codeset = name.split(".", 1)[1].split("@", 1)[0]
    return codeset.replace("-", "").replace("_", "").lower() == "utf8"


def _is_utf8(encoding: str) -> bool:
    try:
        return codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        return False


def initial_environ() -> dict:
    try:
        with open("/proc/self/environ", "rb") as fh:
            return parse_environ(fh.read())
    except OSError:
        return dict(os.environ)


def try_locale(env: dict) -> tuple[bool, str, str]:
    """Apply the locale variables of `env` in this process (then restore): (ok, LC_CTYPE name, codeset)."""
    saved = locale.setlocale(locale.LC_ALL)
    try:
        with environ_set({k: env.get(k) for k in LOCALE_VARS}):
            try:
                locale.setlocale(locale.LC_ALL, "")
            except locale.Error as exc:
                return False, "", str(exc)
            return True, locale.setlocale(locale.LC_CTYPE), locale.nl_langinfo(locale.CODESET)
    finally:
        locale.setlocale(locale.LC_ALL, saved)


def available_locales() -> list[str]:
    exe = which("locale")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "-a"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted(line.strip() for line in out.stdout.splitlines() if line.strip())


def run(p: Probe):
    env = initial_environ()
    var, value = effective_ctype(env)
    shown = {k: env[k] for k in LOCALE_VARS if k in env}
    ok, ctype, codeset = try_locale(env)
    fig: dict[str, Any] = {"env": shown, "effective": f"{var}={value}" if var else "", "lc_ctype": ctype,
           "codeset": codeset if ok else "", "available": available_locales()[:30]}
    p.doc["locale"] = fig
    where = ", ".join(f"{k}={v!r}" for k, v in shown.items()) or "none of LC_ALL, LC_CTYPE, LANG set"
    if var is None:
        p.check("locale.utf8", "failed", f"no locale in the image's environment ({where}): programs run with "
                "the C locale (ASCII)", **fig)
    elif not is_utf8_name(value):
        p.check("locale.utf8", "failed", f"{var}={value} is not a UTF-8 locale ({where})", **fig)
    elif not ok:
        p.check("locale.utf8", "failed", f"{var}={value} does not exist in the image (setlocale: {codeset}; "
                f"installed: {', '.join(fig['available'][:8]) or 'unknown'})", **fig)
    elif codeset != "UTF-8":
        p.check("locale.utf8", "failed", f"{var}={value} gives codeset {codeset}, not UTF-8", **fig)
    else:
        p.check("locale.utf8", "passed", f"{var}={value} (codeset {codeset})", **fig)

    enc: dict[str, Any] = {"preferred": locale.getpreferredencoding(False), "filesystem": sys.getfilesystemencoding(),
           "stdout": getattr(sys.__stdout__, "encoding", None) or "", "utf8_mode": bool(sys.flags.utf8_mode),
           "coerced": os.environ.get("LC_CTYPE") != env.get("LC_CTYPE")}
    bad = [f"{k} encoding {v}" for k, v in enc.items() if k in ("preferred", "filesystem") and not _is_utf8(v)]
    if bad:
        p.check("locale.python", "failed", "python: " + ", ".join(bad), **enc)
    else:
        p.check("locale.python", "passed", "python's preferred and filesystem encodings are UTF-8"
                + (" (only through PEP 538 coercion of a C locale)" if enc["coerced"] else ""), **enc)
