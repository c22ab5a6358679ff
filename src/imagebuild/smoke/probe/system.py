"""system: python, OS release, default user, environment (NVIDIA vars, secret-looking names), /dev/shm; one check:
the CA bundle the image's ENV names exists (system.ca_bundle)."""

from __future__ import annotations

import os
import re
import socket
import sys
from typing import Any

from probe.common import Probe


def parse_os_release(text: str) -> dict:
    """/etc/os-release -> {"id", "version_id", "codename", "pretty_name", "key": "debian12"|"ubuntu24.04", ...}."""
    fields: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        v = v.strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
            v = v[1:-1]
            v = re.sub(r"\\(.)", r"\1", v)
        fields[k.strip().lower()] = v
    os_id = fields.get("id", "").lower()
    version_id = fields.get("version_id", "")
    codename = fields.get("version_codename") or fields.get("ubuntu_codename") or ""
    key = f"{os_id}{version_id}" if os_id and version_id else (f"{os_id}-{codename}" if os_id else "")
    return {
        "id": os_id,
        "version_id": version_id,
        "codename": codename,
        "pretty_name": fields.get("pretty_name", ""),
        "id_like": fields.get("id_like", ""),
        "key": key,
    }


# a variable's name looks like a secret when one of its parts (split at `_`, `-` and `.`) is one of these words, or
# two neighbouring parts are one of the pairs: HF_TOKEN, DB_PASSWORD, AWS_SECRET_ACCESS_KEY, OPENAI_API_KEY, APIKEY;
# never a word inside a part (TIKTOKEN_CACHE_DIR, PASSWORDLESS_SUDO, PWD are not secrets)
_SECRET_PARTS = frozenset({"PASSWORD", "PASSWORDS", "PASSWD", "TOKEN", "TOKENS", "SECRET", "SECRETS", "APIKEY",
                           "ACCESSKEY", "PRIVATEKEY", "CREDENTIAL", "CREDENTIALS", "PASSPHRASE"})
_SECRET_PAIRS = frozenset({("API", "KEY"), ("ACCESS", "KEY"), ("PRIVATE", "KEY"), ("SIGNING", "KEY")})
_SECRET_NAMES = frozenset({"PGPASSWORD", "MYSQL_PWD"})  # well-known secrets whose word is not a part of its own
_URL_CREDS = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]+:[^@/\s]+@")
NVIDIA_ENV = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA")
REPORTED_ENV = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CPATH", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
                "VIRTUAL_ENV", "HOME", "LANG", "LC_ALL", "PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


# the variables that point pip, requests, OpenSSL and curl at a CA bundle file (BRIEF: behind a TLS-intercepting
# proxy pip uses certifi unless PIP_CERT or REQUESTS_CA_BUNDLE names the system bundle)
CA_BUNDLE_ENV = ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE")


def ca_bundle_problems(environ: dict) -> list[str]:
    """The CA-bundle variables set to a file this user cannot read (a build host's path baked into ENV): pip and
    requests then fail every HTTPS request ("Could not find a suitable TLS CA certificate bundle")."""
    bad = []
    for name in CA_BUNDLE_ENV:
        path = (environ.get(name) or "").strip()
        if path and not (os.path.isfile(path) and os.access(path, os.R_OK)):
            bad.append(f"{name}={path} ({'not readable' if os.path.exists(path) else 'no such file'})")
    return bad


def secret_like_name(name: str) -> bool:
    """Is one of the name's parts a secret's word (or two neighbouring parts a secret's pair)? See _SECRET_PARTS."""
    parts = [x for x in re.split(r"[_.-]+", name.upper()) if x]
    return name.upper() in _SECRET_NAMES or any(x in _SECRET_PARTS for x in parts) or any(pair in _SECRET_PAIRS for pair in zip(parts, parts[1:], strict=False))


def find_secret_env(environ: dict) -> list[dict]:
    """Names (never values) of variables that look like they carry a secret."""
    found = []
    for name in sorted(environ):
        value = environ.get(name) or ""
        if not value.strip():
            continue
        if secret_like_name(name):
            found.append({"name": name, "why": "name looks like a secret"})
        elif _URL_CREDS.search(value):
            found.append({"name": name, "why": "value holds URL credentials (user:password@)"})
    return found


def run(p: Probe):
    import platform

    py = {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "base_prefix": getattr(sys, "base_prefix", sys.prefix),
        "in_venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
    }
    osr = {}
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            with open(path) as fh:
                osr = parse_os_release(fh.read())
            break
        except OSError:
            continue
    user: dict[str, Any] = {"uid": os.getuid(), "gid": os.getgid(), "name": None, "home": None, "shell": None,
            "groups": sorted(os.getgroups())}
    try:
        import pwd

        pw = pwd.getpwuid(os.getuid())
        user.update(name=pw.pw_name, home=pw.pw_dir, shell=pw.pw_shell)
    except (KeyError, ImportError):
        pass
    env = dict(os.environ)
    shm: dict[str, Any] = {"path": "/dev/shm", "bytes": None}
    try:
        st = os.statvfs("/dev/shm")
        shm["bytes"] = st.f_blocks * st.f_frsize
        shm["free_bytes"] = st.f_bavail * st.f_frsize
    except OSError as exc:
        shm["error"] = str(exc)
    p.doc["system"] = {
        "python": py,
        "os": osr,
        "user": user,
        "env": {
            "nvidia": {k: env.get(k) for k in NVIDIA_ENV},
            "reported": {k: env.get(k) for k in REPORTED_ENV if k in env},
            "secret_names": find_secret_env(env),
        },
        "shm": shm,
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
    }
    named = {k: env[k] for k in CA_BUNDLE_ENV if env.get(k, "").strip()}
    bad = ca_bundle_problems(env)
    if bad:
        p.check("system.ca_bundle", "failed", "CA bundle named in the environment is missing: " + ", ".join(bad)
                + ": pip and requests fail every HTTPS request", **named)
    else:
        p.check("system.ca_bundle", "passed", ", ".join(f"{k}={v}" for k, v in named.items()) + " readable" if named
                else "no CA bundle variable set: the system store and certifi's are used", **named)
