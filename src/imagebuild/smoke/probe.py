#!/usr/bin/env python3
"""In-image probe: run with the image's own python, print ONE JSON document on stdout.

Plain script: standard library plus (optionally) torch and what the image ships. It never imports imagebuild, so it
can be copied into any container or run directly on a GPU host (scripts/gpu-probe.sh).

    python probe.py [--sections system,versions,...] [--perf] [--timeout S] [--output FILE]
    python probe.py --table FILE          # render a short table of a saved result

Every check in `checks` has name, section, status (passed|failed|skipped), reason and figures. Everything printed by
libraries (NCCL_DEBUG, warnings) goes to stderr; stdout carries only the JSON.

The parsing helpers (parse_os_release, parse_nccl_log, parse_nvidia_smi_list, ...) are pure functions, importable
for unit tests and by the testinfra suite.
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

PROBE_VERSION = 1
SECTIONS = ("system", "versions", "libraries", "gpu", "tf32", "amp", "distributed", "te", "dev", "perf")
DEFAULT_SECTIONS = tuple(s for s in SECTIONS if s not in ("dev", "perf"))
NO_GPU = "no GPU visible in the container"
NO_CUDA_TORCH = NO_GPU + " (CPU variant: torch built without CUDA)"
NO_TORCH = "torch is not installed"
RESULT_MARK = "IBPROBE-RESULT "
_CHILDREN: list = []  # Popen objects (own sessions) the watchdog kills on overrun

# ---------------------------------------------------------------------------------------------------------------
# pure parsing helpers (unit-tested on captured text)
# ---------------------------------------------------------------------------------------------------------------


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


_NCCL_CHANNEL = re.compile(
    r"NCCL INFO Channel (?P<channel>\d+(?:/\d+)?) ?: (?P<src>\d+)\[(?P<srcdev>[^\]]+)\] -> (?P<dst>\d+)\[(?P<dstdev>[^\]]+)\]"
    r"(?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)\s*$"
)
_NCCL_VERSION = re.compile(r"NCCL version (?P<v>[0-9][\w.+-]*)")
_NCCL_RANK_PREFIX = re.compile(r"^\[\d+\]\s+")


def nccl_transport_kind(via: str) -> str:
    """`P2P/CUMEM/read` -> P2P/CUMEM, `NET/IBext_v8/0(1)/GDRDMA` -> NET/IB, `SHM/direct/direct` -> SHM, ..."""
    v = via.strip()
    if v.startswith("P2P/CUMEM"):
        return "P2P/CUMEM"
    if v.startswith("P2P/IPC"):
        return "P2P/IPC"
    if v.startswith("P2P/direct"):
        return "P2P/direct"
    if v.startswith("P2P"):
        return "P2P"
    if v.startswith("SHM"):
        return "SHM"
    if v.startswith("NET/IB"):
        return "NET/IB"
    if v.startswith("NET/Socket"):
        return "NET/Socket"
    if v.startswith("NET/"):
        return "NET/" + v.split("/")[1].split("(")[0]
    if v.startswith("NVLS"):
        return "NVLS"
    if v.startswith("CollNet"):
        return "CollNet"
    return v.split("/")[0]


def parse_nccl_log(text: str) -> dict:
    """NCCL_DEBUG=INFO output -> version, channel connections and the set of transports used."""
    version = None
    channels = []
    nvls = None
    for raw in text.splitlines():
        line = _NCCL_RANK_PREFIX.sub("", raw.rstrip())
        if version is None:
            m = _NCCL_VERSION.search(line)
            if m:
                version = m.group("v")
        m = _NCCL_CHANNEL.search(line)
        if m:
            via = m.group("via")
            channels.append({
                "channel": m.group("channel"),
                "src": int(m.group("src")), "src_dev": m.group("srcdev"),
                "dst": int(m.group("dst")), "dst_dev": m.group("dstdev"),
                "direction": m.group("dir"),
                "via": via,
                "transport": nccl_transport_kind(via),
                "gdrdma": "GDRDMA" in via,
            })
            continue
        if "NCCL INFO" in line and "NVLS" in line:
            low = line.lower()
            if "not available" in low or "not supported" in low or "disabled" in low:
                nvls = False if nvls is None else nvls
            elif "available" in low or "nvls comm" in low or "multicast" in low or " via nvls" in low:
                nvls = True
    transports = sorted({c["transport"] for c in channels})
    if nvls and "NVLS" not in transports:
        transports.append("NVLS")
    return {
        "version": version,
        "channels": channels,
        "transports": transports,
        "nvls": bool(nvls),
        "summary": ", ".join(transports) if transports else "none",
    }


_SMI_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>GPU-[^)]+)\)\s*$")
_SMI_MIG = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<device>\d+): \(UUID: (?P<uuid>MIG-[^)]+)\)\s*$")


def parse_nvidia_smi_list(text: str) -> dict:
    """`nvidia-smi -L` -> {"gpus": [{index, name, uuid, mig: [{profile, device, uuid}]}], "gpu_count", "mig_count"}."""
    gpus: list[dict] = []
    unparsed = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        m = _SMI_GPU.match(raw.strip())
        if m:
            gpus.append({"index": int(m.group("index")), "name": m.group("name"), "uuid": m.group("uuid"), "mig": []})
            continue
        m = _SMI_MIG.match(raw if raw[:1].isspace() else " " + raw)
        if m and gpus:
            gpus[-1]["mig"].append({"profile": m.group("profile"), "device": int(m.group("device")),
                                    "uuid": m.group("uuid")})
            continue
        unparsed.append(raw.strip())
    return {
        "gpus": gpus,
        "gpu_count": len(gpus),
        "mig_count": sum(len(g["mig"]) for g in gpus),
        "unparsed": unparsed,
    }


_SECRET_NAME = re.compile(r"PASSWORD|PASSWD|TOKEN|SECRET|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL", re.I)
_URL_CREDS = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]+:[^@/\s]+@")
NVIDIA_ENV = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA")
REPORTED_ENV = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CPATH", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
                "VIRTUAL_ENV", "HOME", "LANG", "LC_ALL", "PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


def find_secret_env(environ: dict) -> list[dict]:
    """Names (never values) of variables that look like they carry a secret."""
    found = []
    for name in sorted(environ):
        value = environ.get(name) or ""
        if not value.strip():
            continue
        if _SECRET_NAME.search(name):
            found.append({"name": name, "why": "name looks like a secret"})
        elif _URL_CREDS.search(value):
            found.append({"name": name, "why": "value holds URL credentials (user:password@)"})
    return found


_LIB = re.compile(r"^(?P<base>lib(?:cudnn[a-z0-9_]*|nccl|cublas|cublasLt))\.so\.(?P<major>\d+)(?:\.[0-9.]+)?$")


def library_key(filename: str) -> str | None:
    """`libcudnn_ops.so.9.10.2` -> `libcudnn_ops.so.9`; `libnccl.so.2` -> `libnccl.so.2`; others -> None."""
    m = _LIB.match(filename)
    return f"{m.group('base')}.so.{m.group('major')}" if m else None


def library_family(key: str) -> str:
    return "cudnn" if key.startswith("libcudnn") else ("nccl" if key.startswith("libnccl") else "cublas")


def group_library_copies(entries) -> dict:
    """[(path, realpath)] -> {"libcudnn.so.9": [realpath, ...]}: copies counted once per real file."""
    out: dict[str, set] = {}
    for path, real in entries:
        key = library_key(os.path.basename(path))
        if key:
            out.setdefault(key, set()).add(real)
    return {k: sorted(v) for k, v in sorted(out.items())}


def parse_ldconfig(text: str) -> list[str]:
    """`ldconfig -p` -> library paths."""
    paths = []
    for line in text.splitlines():
        if "=>" in line:
            paths.append(line.split("=>", 1)[1].strip())
    return paths


def format_cudnn_version(v) -> str | None:
    """torch.backends.cudnn.version(): 91002 -> "9.10.2" (cuDNN 9 scheme), 8907 -> "8.9.7"."""
    if v is None:
        return None
    v = int(v)
    if v >= 90000:
        return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    return f"{v // 1000}.{(v % 1000) // 100}.{v % 100}"


def parse_sshd_T(text: str) -> dict:
    """`sshd -T` (effective config, lowercase keys) -> {key: value}."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if parts:
            out.setdefault(parts[0].lower(), parts[1] if len(parts) > 1 else "")
    return out


def parse_sshd_config_files(texts) -> dict:
    """First value wins across sshd_config (+ Include'd) text, Match blocks ignored: a fallback when `sshd -T` fails."""
    out = {}
    for text in texts:
        in_match = False
        for line in text.splitlines():
            s = line.split("#", 1)[0].strip()
            if not s:
                continue
            parts = s.split(None, 1)
            key = parts[0].lower()
            if key == "match":
                in_match = True
                continue
            if in_match:
                continue
            out.setdefault(key, parts[1].strip().strip('"') if len(parts) > 1 else "")
    return out


def _split_version(v: str) -> list[str]:
    return [p for p in re.split(r"[.]", v) if p != ""]


def normalize_arch(a: str) -> str:
    """"9.0" / "90" / "sm90" / "sm_90" -> "sm_90"; "compute_90" kept."""
    a = a.strip().lower()
    if a.startswith("compute_"):
        return a
    a = a.replace("sm_", "").replace("sm", "")
    if "." in a:
        major, minor = a.split(".", 1)
        a = f"{major}{minor}"
    return f"sm_{a}"


ABSENT = ("", "none", "null", "-", "n/a")
TRUE = ("1", "true", "yes", "on")


def versions_match(key: str, expected, found) -> bool:
    """Does the found value satisfy the expectation?

    Versions match when the shorter dotted form is a prefix of the longer (`3.11` ~ `3.11.2`, `9.10.2.21` ~ `9.10.2`);
    a local part (`+cu128`) is compared only when the expectation has one; `cuda=cpu` means torch has no CUDA;
    an empty/`none` expectation means "absent".
    """
    exp = "" if expected is None else str(expected).strip()
    key = key.replace("-", "_")
    if key == "tf32":
        return (exp.lower() in TRUE) == bool(found)
    if key == "cuda" and exp.lower() == "cpu":
        return found in (None, "", "cpu")
    if exp.lower() in ABSENT:
        return found in (None, "")
    if found in (None, ""):
        return False
    f = str(found).strip()
    if key == "os":
        return exp.lower().replace("-", "") == f.lower().replace("-", "")
    if "+" in exp:
        return exp == f
    fe, ff = _split_version(exp.split("+")[0]), _split_version(f.split("+")[0])
    n = min(len(fe), len(ff))
    return n > 0 and fe[:n] == ff[:n]


# ---------------------------------------------------------------------------------------------------------------
# probe machinery
# ---------------------------------------------------------------------------------------------------------------


class Probe:
    def __init__(self, sections, perf=False, deadline=None):
        self.sections = list(sections)
        self.perf = perf
        self.deadline = deadline
        self.doc: dict = {"probe": {"version": PROBE_VERSION, "sections": self.sections, "errors": []}, "checks": []}
        self.torch = None
        self.torch_error = None
        self._gpu = None

    # results ----------------------------------------------------------------------------------------------------
    def check(self, name, status, reason="", **figures):
        section = name.split(".", 1)[0]
        self.doc["checks"].append({"name": name, "section": section, "status": status, "reason": reason,
                                   "figures": figures})
        return status

    def remaining(self, default):
        if self.deadline is None:
            return default
        return max(5.0, min(default, self.deadline - time.time()))

    # torch ------------------------------------------------------------------------------------------------------
    def import_torch(self):
        if self.torch is not None or self.torch_error is not None:
            return self.torch
        t0 = time.time()
        try:
            import warnings

            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                import torch  # noqa: F401
            self.torch = torch
            self.doc["torch_import"] = {"seconds": round(time.time() - t0, 3),
                                        "warnings": [str(w.message)[:300] for w in caught][:10]}
            # the policy as a fresh process sees it, before any section touches a flag
            self.doc["tf32_at_import"] = tf32_state(torch)
        except Exception as exc:  # ImportError, OSError on missing libs, RuntimeError ...
            self.torch_error = f"{type(exc).__name__}: {exc}"
            self.doc["torch_import"] = {"seconds": round(time.time() - t0, 3), "error": self.torch_error}
        return self.torch

    def gpu_state(self):
        """(usable, reason): can GPU checks run?"""
        if self._gpu is None:
            torch = self.import_torch()
            if torch is None:
                self._gpu = (False, NO_TORCH if self.torch_error is None or "No module named" in self.torch_error
                             else f"torch import failed: {self.torch_error}")
            elif not getattr(torch.version, "cuda", None):
                self._gpu = (False, NO_CUDA_TORCH)
            else:
                try:
                    ok = torch.cuda.is_available() and torch.cuda.device_count() > 0
                except Exception as exc:
                    ok, self.doc["probe"]["errors"] = False, self.doc["probe"]["errors"] + [f"cuda: {exc}"]
                self._gpu = (True, "") if ok else (False, NO_GPU)
        return self._gpu

    # run --------------------------------------------------------------------------------------------------------
    def run(self):
        t0 = time.time()
        timings = {}
        for section in SECTIONS:
            if section not in self.sections:
                continue
            s0 = time.time()
            try:
                getattr(self, f"section_{section}")()
            except Exception as exc:
                tb = traceback.format_exc(limit=6)
                self.doc["probe"]["errors"].append(f"{section}: {type(exc).__name__}: {exc}")
                self.check(f"{section}.probe", "failed", f"probe section crashed: {type(exc).__name__}: {exc}",
                           traceback=tb[-2000:])
            timings[section] = round(time.time() - s0, 3)
        self.doc["probe"]["section_seconds"] = timings
        self.doc["probe"]["seconds"] = round(time.time() - t0, 3)
        return self.doc

    # system -----------------------------------------------------------------------------------------------------
    def section_system(self):
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
        user = {"uid": os.getuid(), "gid": os.getgid(), "name": None, "home": None, "shell": None,
                "groups": sorted(os.getgroups())}
        try:
            import pwd

            pw = pwd.getpwuid(os.getuid())
            user.update(name=pw.pw_name, home=pw.pw_dir, shell=pw.pw_shell)
        except (KeyError, ImportError):
            pass
        env = dict(os.environ)
        shm = {"path": "/dev/shm", "bytes": None}
        try:
            st = os.statvfs("/dev/shm")
            shm["bytes"] = st.f_blocks * st.f_frsize
            shm["free_bytes"] = st.f_bavail * st.f_frsize
        except OSError as exc:
            shm["error"] = str(exc)
        self.doc["system"] = {
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

    # versions ---------------------------------------------------------------------------------------------------
    def section_versions(self):
        import platform

        v = {"python": platform.python_version(), "torch": None, "cuda": None, "cudnn": None, "nccl": None,
             "torchvision": None, "torchaudio": None, "transformer_engine": None, "triton": None,
             "import_errors": {}}
        dists = {}
        try:
            from importlib import metadata

            for dist in metadata.distributions():
                name = (dist.metadata.get("Name") or "").lower().replace("_", "-")
                if name.startswith("nvidia-") or name in ("torch", "torchvision", "torchaudio", "triton",
                                                          "pytorch-triton", "transformer-engine",
                                                          "transformer-engine-torch", "transformer-engine-cu12",
                                                          "transformer-engine-cu13", "numpy", "jupyterlab",
                                                          "ninja"):
                    dists[name] = dist.version
        except Exception as exc:
            v["import_errors"]["importlib.metadata"] = str(exc)
        v["dists"] = dict(sorted(dists.items()))
        torch = self.import_torch()
        if torch is None:
            if self.torch_error and "No module named 'torch'" not in self.torch_error:
                v["import_errors"]["torch"] = self.torch_error
        else:
            v["torch"] = torch.__version__
            v["cuda"] = torch.version.cuda
            v["torch_git"] = getattr(torch.version, "git_version", None)
            try:
                v["cudnn"] = format_cudnn_version(torch.backends.cudnn.version())
            except Exception as exc:
                v["import_errors"]["cudnn"] = str(exc)
            try:
                if torch.version.cuda and hasattr(torch.cuda, "nccl"):
                    nv = torch.cuda.nccl.version()
                    v["nccl"] = ".".join(str(x) for x in nv) if isinstance(nv, tuple) else str(nv)
            except Exception as exc:
                v["import_errors"]["nccl"] = str(exc)
            for mod in ("torchvision", "torchaudio"):
                try:
                    m = __import__(mod)
                    v[mod] = m.__version__
                except ImportError as exc:
                    if f"No module named '{mod}'" not in str(exc):
                        v["import_errors"][mod] = f"{type(exc).__name__}: {exc}"
                except Exception as exc:
                    v["import_errors"][mod] = f"{type(exc).__name__}: {exc}"
        for name in ("triton", "pytorch-triton"):
            if name in dists:
                v["triton"] = dists[name]
                break
        for name in ("transformer-engine", "transformer-engine-torch"):
            if name in dists:
                v["transformer_engine"] = dists[name]
                break
        self.doc["versions"] = v

    # libraries --------------------------------------------------------------------------------------------------
    def section_libraries(self):
        roots = ["/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local", "/opt"]
        try:
            import site

            roots += site.getsitepackages() + [site.getusersitepackages()]
        except Exception:
            pass
        roots += [p for p in sys.path if p and os.path.isdir(p)]
        entries = []
        seen_dirs = set()
        skip = {"/proc", "/sys", "/dev"}

        def walk(top):
            try:
                real_top = os.path.realpath(top)
            except OSError:
                return
            if real_top in seen_dirs or real_top in skip:
                return
            seen_dirs.add(real_top)
            try:
                it = os.scandir(top)
            except OSError:
                return
            with it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            walk(e.path)
                        elif e.name.startswith("lib") and ".so." in e.name and library_key(e.name):
                            if os.path.exists(e.path):
                                entries.append((e.path, os.path.realpath(e.path)))
                    except OSError:
                        continue

        for r in roots:
            if os.path.isdir(r):
                walk(r)
        ld = []
        try:
            out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=20)
            ld = [p for p in parse_ldconfig(out.stdout) if library_key(os.path.basename(p))]
        except (OSError, subprocess.SubprocessError):
            for cand in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
                try:
                    out = subprocess.run([cand, "-p"], capture_output=True, text=True, timeout=20)
                    ld = [p for p in parse_ldconfig(out.stdout) if library_key(os.path.basename(p))]
                    break
                except (OSError, subprocess.SubprocessError):
                    continue
        for p in ld:
            if os.path.exists(p):
                entries.append((p, os.path.realpath(p)))
        copies = group_library_copies(entries)
        self.doc["libraries"] = {
            "copies": copies,
            "counts": {k: len(v) for k, v in copies.items()},
            "ldconfig": sorted(set(ld)),
            "searched": sorted({os.path.realpath(r) for r in roots if os.path.isdir(r)}),
        }
        dup = {k: v for k, v in copies.items() if len(v) > 1}
        if dup:
            self.check("libraries.one_copy", "failed",
                       "; ".join(f"{k}: {len(v)} copies ({', '.join(v)})" for k, v in dup.items()), copies=copies)
        else:
            self.check("libraries.one_copy", "passed",
                       "one copy of each" if copies else "no cuDNN/NCCL/cuBLAS libraries in the image",
                       counts={k: len(v) for k, v in copies.items()})

    # gpu --------------------------------------------------------------------------------------------------------
    def section_gpu(self):
        torch = self.import_torch()
        g: dict = {"available": False, "count": 0, "devices": [], "arch_list": [], "nvidia_smi": None}
        if torch is not None and getattr(torch.version, "cuda", None):
            try:
                flags = torch._C._cuda_getArchFlags()  # compile-time list; needs no GPU
                g["arch_list"] = sorted(set(flags.split())) if flags else []
            except Exception as exc:
                g["arch_list_error"] = str(exc)
        usable, reason = self.gpu_state()
        if usable:
            g["available"] = True
            g["count"] = torch.cuda.device_count()
            for i in range(g["count"]):
                p = torch.cuda.get_device_properties(i)
                cap = torch.cuda.get_device_capability(i)
                g["devices"].append({"index": i, "name": p.name, "capability": f"{cap[0]}.{cap[1]}",
                                     "sm": f"sm_{cap[0]}{cap[1]}", "memory_bytes": int(p.total_memory),
                                     "multiprocessors": int(p.multi_processor_count)})
            try:
                g["arch_list_runtime"] = torch.cuda.get_arch_list()
            except Exception:
                pass
        smi = _which("nvidia-smi")
        if smi:
            try:
                out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
                g["nvidia_smi"] = {"path": smi, "returncode": out.returncode,
                                   "output": out.stdout[-4000:], "stderr": out.stderr[-1000:],
                                   **parse_nvidia_smi_list(out.stdout)}
                q = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=30)
                if q.returncode == 0 and q.stdout.strip():
                    g["driver"] = q.stdout.strip().splitlines()[0].strip()
            except (OSError, subprocess.SubprocessError) as exc:
                g["nvidia_smi"] = {"path": smi, "error": str(exc)}
        self.doc["gpu"] = g
        if not usable:
            self.check("gpu.available", "skipped", reason, arch_list=g["arch_list"])
            self.check("gpu.nvidia_smi", "skipped", reason,
                       listed=(g["nvidia_smi"] or {}).get("gpu_count"))
            return
        self.check("gpu.available", "passed", f"{g['count']} GPU(s): "
                   + ", ".join(f"{d['name']} ({d['sm']})" for d in g["devices"]),
                   count=g["count"], devices=g["devices"])
        smi_doc = g["nvidia_smi"]
        if not smi_doc or smi_doc.get("error") or smi_doc.get("returncode"):
            self.check("gpu.nvidia_smi", "failed", "nvidia-smi not found in PATH" if not smi_doc
                       else f"nvidia-smi -L failed: {smi_doc.get('error') or smi_doc.get('stderr', '').strip()}")
        else:
            listed = smi_doc["gpu_count"] + smi_doc["mig_count"]
            if smi_doc["gpu_count"] == 0 or listed < g["count"]:
                self.check("gpu.nvidia_smi", "failed",
                           f"nvidia-smi -L lists {smi_doc['gpu_count']} GPU(s) and {smi_doc['mig_count']} MIG "
                           f"device(s), torch sees {g['count']}", listed=listed)
            else:
                self.check("gpu.nvidia_smi", "passed",
                           f"{smi_doc['gpu_count']} GPU(s), {smi_doc['mig_count']} MIG device(s)",
                           gpus=smi_doc["gpus"], driver=g.get("driver"))
        missing = [d["sm"] for d in g["devices"] if g["arch_list"] and d["sm"] not in g["arch_list"]
                   and f"compute_{d['sm'][3:]}" not in g["arch_list"]]
        if missing:
            self.check("gpu.device_arch", "failed", f"torch carries no kernels for {', '.join(missing)}; "
                       f"arch list {' '.join(g['arch_list'])}")
        else:
            self.check("gpu.device_arch", "passed", "every visible GPU's arch is in torch's arch list",
                       archs=[d["sm"] for d in g["devices"]])

    # tf32 -------------------------------------------------------------------------------------------------------
    def section_tf32(self):
        torch = self.import_torch()
        if torch is None:
            self.doc["tf32"] = {}
            self.check("tf32.policy", "skipped", NO_TORCH)
            return
        state = self.doc.get("tf32_at_import") or tf32_state(torch)
        t = {"at_import": state, "env_override": os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"),
             "hook": _find_tf32_hook()}
        self.doc["tf32"] = t
        self.check("tf32.policy", "passed", "tf32 matmul " + ("on" if state.get("matmul_tf32") else "off")
                   + " in a fresh process", **state)
        usable, reason = self.gpu_state()
        if not usable:
            self.check("tf32.speedup", "skipped", reason)
            self.check("tf32.accuracy", "skipped", reason)
            return
        n = 4096
        dev = torch.device("cuda:0")
        gen = torch.Generator(device=dev).manual_seed(0)
        a = torch.randn(n, n, device=dev, generator=gen)
        b = torch.randn(n, n, device=dev, generator=gen)
        ref = (a.double() @ b.double())
        ref_norm = ref.norm().item()

        def rel_err(c):
            return ((c.double() - ref).norm() / ref_norm).item()

        err_default = rel_err(a @ b)  # the image's policy, untouched
        saved = _save_tf32(torch)
        try:
            _set_tf32(torch, False)
            t_off = _time_cuda(torch, lambda: a @ b, warmup=3, reps=10)
            err_off = rel_err(a @ b)
            _set_tf32(torch, True)
            t_on = _time_cuda(torch, lambda: a @ b, warmup=3, reps=10)
            err_on = rel_err(a @ b)
        finally:
            _restore_tf32(torch, saved)
        speedup = t_off / t_on if t_on > 0 else 0.0
        flops = 2 * n ** 3
        fig = {"n": n, "ms_ieee": round(t_off * 1e3, 3), "ms_tf32": round(t_on * 1e3, 3),
               "speedup": round(speedup, 2), "tflops_ieee": round(flops / t_off / 1e12, 1),
               "tflops_tf32": round(flops / t_on / 1e12, 1), "rel_err_ieee": err_off, "rel_err_tf32": err_on,
               "rel_err_default": err_default}
        t["gpu"] = fig
        if speedup >= 1.3:
            self.check("tf32.speedup", "passed", f"TF32 {speedup:.1f}x faster than IEEE fp32", **fig)
        else:
            self.check("tf32.speedup", "failed", f"TF32 only {speedup:.2f}x the IEEE fp32 speed (want >= 1.3x)",
                       **fig)
        ok_err = err_on < 5e-3 and err_off < 1e-5
        # the default state really computes in TF32 iff its error is TF32-sized (not IEEE-sized)
        default_is_tf32 = err_default > 2e-5
        fig["default_is_tf32"] = default_is_tf32
        if not ok_err:
            self.check("tf32.accuracy", "failed",
                       f"relative error vs float64: tf32 {err_on:.2e} (want < 5e-3), ieee {err_off:.2e}", **fig)
        else:
            self.check("tf32.accuracy", "passed", f"relative error vs float64: tf32 {err_on:.2e}, ieee "
                       f"{err_off:.2e}; default matmul runs {'TF32' if default_is_tf32 else 'IEEE fp32'}", **fig)

    # amp --------------------------------------------------------------------------------------------------------
    def section_amp(self):
        torch = self.import_torch()
        self.doc["amp"] = {}
        if torch is None:
            for name in ("amp.cuda_fp16", "amp.cuda_bf16", "amp.cpu_bf16"):
                self.check(name, "skipped", NO_TORCH)
            return
        usable, reason = self.gpu_state()
        for dtype_name in ("fp16", "bf16"):
            name = f"amp.cuda_{dtype_name}"
            if not usable:
                self.check(name, "skipped", reason)
                continue
            res = _amp_train(torch, "cuda", dtype_name, use_scaler=True)
            self.doc["amp"][f"cuda_{dtype_name}"] = res
            self.check(name, res["status"], res["reason"], **res["figures"])
        res = _amp_train(torch, "cpu", "bf16", use_scaler=False)
        self.doc["amp"]["cpu_bf16"] = res
        self.check("amp.cpu_bf16", res["status"], res["reason"], mode="cpu-bf16", **res["figures"])

    # distributed ------------------------------------------------------------------------------------------------
    def section_distributed(self):
        torch = self.import_torch()
        self.doc["distributed"] = {}
        if torch is None:
            self.check("distributed.nccl", "skipped", NO_TORCH)
            self.check("distributed.gloo", "skipped", NO_TORCH)
            return
        usable, reason = self.gpu_state()
        if usable:
            world = torch.cuda.device_count()
            res = _run_dist(world, "nccl", perf=self.perf, timeout=self.remaining(240))
            self.doc["distributed"]["nccl"] = res
            self.check("distributed.nccl", res["status"], res["reason"], **res["figures"])
            self.check("distributed.gloo", "skipped", "GPU present: NCCL checked instead")
        else:
            self.check("distributed.nccl", "skipped", reason)
            res = _run_dist(2, "gloo", perf=False, timeout=self.remaining(120))
            self.doc["distributed"]["gloo"] = res
            self.check("distributed.gloo", res["status"], res["reason"], **res["figures"])

    # transformer_engine -----------------------------------------------------------------------------------------
    def section_te(self):
        installed = None
        try:
            from importlib import metadata

            for name in ("transformer_engine", "transformer-engine", "transformer_engine_torch"):
                try:
                    installed = metadata.version(name)
                    break
                except metadata.PackageNotFoundError:
                    continue
        except Exception:
            pass
        self.doc["te"] = {"installed": installed}
        if installed is None:
            self.check("te.import", "skipped", "transformer_engine is not installed")
            self.check("te.fp8", "skipped", "transformer_engine is not installed")
            return
        # isolated: a broken TE build can abort the process
        res = _run_child(["--sections", "te", "--te-child"], timeout=self.remaining(300))
        if res.get("error"):
            self.check("te.import", "failed", res["error"])
            self.check("te.fp8", "skipped", "transformer_engine probe did not finish")
            return
        self.doc["te"].update(res.get("te", {}))
        for c in res.get("checks", []):
            self.doc["checks"].append(c)

    def te_child(self):
        t = self.doc.setdefault("te", {})
        t0 = time.time()
        try:
            import transformer_engine  # noqa: F401
            import transformer_engine.pytorch as te
        except Exception as exc:
            self.check("te.import", "failed", f"import transformer_engine.pytorch: {type(exc).__name__}: {exc}")
            self.check("te.fp8", "skipped", "transformer_engine does not import")
            return
        t["version"] = getattr(transformer_engine, "__version__", None)
        t["import_seconds"] = round(time.time() - t0, 3)
        self.check("te.import", "passed", f"transformer_engine {t['version']}", seconds=t["import_seconds"])
        torch = self.import_torch()
        usable, reason = self.gpu_state()
        if not usable:
            self.check("te.fp8", "skipped", reason)
            return
        cap = torch.cuda.get_device_capability(0)
        if cap < (8, 9):
            self.check("te.fp8", "skipped", f"FP8 needs sm_89+, GPU is sm_{cap[0]}{cap[1]}")
            return
        try:
            from transformer_engine.common import recipe

            torch.manual_seed(0)
            layer = te.Linear(768, 768, bias=True).cuda()
            x = torch.randn(32, 768, device="cuda", requires_grad=True)
            rec = recipe.DelayedScaling(margin=0, fp8_format=recipe.Format.HYBRID)
            fp8_ctx = getattr(te, "fp8_autocast", None) or te.autocast
            with fp8_ctx(enabled=True, fp8_recipe=rec):
                y = layer(x)
            loss = y.float().pow(2).mean()
            loss.backward()
            torch.cuda.synchronize()
            finite = bool(torch.isfinite(y).all().item()) and bool(torch.isfinite(x.grad).all().item())
            wgrad = layer.weight.grad is not None and bool(torch.isfinite(layer.weight.grad).all().item())
            fig = {"sm": f"sm_{cap[0]}{cap[1]}", "loss": float(loss.item()), "out_dtype": str(y.dtype)}
            if finite and wgrad:
                self.check("te.fp8", "passed", "te.Linear forward/backward under fp8_autocast", **fig)
            else:
                self.check("te.fp8", "failed", "non-finite output or gradient under fp8_autocast", **fig)
        except Exception as exc:
            self.check("te.fp8", "failed", f"{type(exc).__name__}: {exc}"[:1000])

    # dev --------------------------------------------------------------------------------------------------------
    def section_dev(self):
        self.doc["dev"] = {}
        jup = _Jupyter()
        jup.start()  # boots while the compilers run
        try:
            self._dev_cpp_extension()
            self._dev_nvcc()
            res = jup.check(timeout=self.remaining(90))
        finally:
            jup.stop()
        self.doc["dev"]["jupyter"] = res
        self.check("dev.jupyter", res["status"], res["reason"], **res.get("figures", {}))
        res = _sshd_check()
        self.doc["dev"]["sshd"] = res
        self.check("dev.sshd", res["status"], res["reason"], **res.get("figures", {}))

    def _dev_cpp_extension(self):
        torch = self.import_torch()
        if torch is None:
            self.check("dev.cpp_extension", "failed", NO_TORCH)
            return
        t0 = time.time()
        build = tempfile.mkdtemp(prefix="ibprobe-ext-")
        try:
            from torch.utils import cpp_extension

            # Python.h + ATen + the op registry: proves compiler, headers (python3-dev) and libtorch linking in ~7 s
            # on 2 cores, where load_inline's <torch/extension.h> takes ~35 s
            src = os.path.join(build, "ibprobe_ext.cpp")
            with open(src, "w") as fh:
                fh.write(_CPP_EXT_SRC)
            cpp_extension.load(name="ibprobe_ext", sources=[src], build_directory=build, is_python_module=False,
                               extra_cflags=["-O0"], verbose=False)
            x = torch.arange(4, dtype=torch.float32)
            ok = torch.equal(torch.ops.ibprobe.add_one(x), x + 1)
            fig = {"seconds": round(time.time() - t0, 2), "compiler": os.environ.get("CXX", "c++")}
            self.check("dev.cpp_extension", "passed" if ok else "failed",
                       "torch.utils.cpp_extension built an op and torch.ops called it" if ok
                       else "extension returned a wrong result", **fig)
        except Exception as exc:
            self.check("dev.cpp_extension", "failed", f"{type(exc).__name__}: {_compiler_error(str(exc))}",
                       seconds=round(time.time() - t0, 2), log_tail=str(exc)[-3000:])
        finally:
            _rmtree(build)

    def _dev_nvcc(self):
        torch = self.import_torch()
        cuda = getattr(getattr(torch, "version", None), "cuda", None) if torch else None
        nvcc = _find_nvcc()
        self.doc["dev"]["nvcc"] = nvcc
        if not cuda and not nvcc:
            self.check("dev.nvcc", "skipped", "CPU variant: no CUDA toolchain expected")
            return
        if not nvcc:
            self.check("dev.nvcc", "failed", "nvcc not found (PATH, /usr/local/cuda/bin, site-packages nvidia/*/bin)")
            return
        usable, reason = self.gpu_state()
        work = tempfile.mkdtemp(prefix="ibprobe-nvcc-")
        try:
            src = os.path.join(work, "k.cu")
            with open(src, "w") as fh:
                fh.write(_CU_SRC)
            exe = os.path.join(work, "k")
            cmd = [nvcc, "-O2", "-o", exe, src] + (["-arch=native"] if usable else [])
            t0 = time.time()
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=self.remaining(180))
            fig = {"nvcc": nvcc, "compile_seconds": round(time.time() - t0, 2)}
            if out.returncode != 0 and usable:  # old nvcc without -arch=native
                out = subprocess.run(cmd[:-1], capture_output=True, text=True, timeout=self.remaining(180))
            if out.returncode != 0:
                self.check("dev.nvcc", "failed", f"nvcc failed: {_compiler_error(out.stderr or out.stdout)}",
                           log_tail=(out.stderr or out.stdout)[-3000:], **fig)
                return
            if not usable:
                self.check("dev.nvcc", "passed", f"compiled; not run: {reason}", ran=False, **fig)
                return
            run = subprocess.run([exe], capture_output=True, text=True, timeout=60)
            fig["ran"] = True
            if run.returncode == 0 and run.stdout.strip() == "ok 1024":
                self.check("dev.nvcc", "passed", "compiled and ran a kernel", **fig)
            else:
                self.check("dev.nvcc", "failed", f"kernel run: rc={run.returncode} "
                           f"{(run.stdout + run.stderr).strip()[-800:]}", **fig)
        except (OSError, subprocess.SubprocessError) as exc:
            self.check("dev.nvcc", "failed", f"{type(exc).__name__}: {exc}")
        finally:
            _rmtree(work)

    # perf -------------------------------------------------------------------------------------------------------
    def section_perf(self):
        torch = self.import_torch()
        self.doc["perf"] = {}
        usable, reason = (False, NO_TORCH) if torch is None else self.gpu_state()
        names = ("perf.gemm_fp32", "perf.gemm_tf32", "perf.gemm_bf16")
        if not usable:
            for n in names:
                self.check(n, "skipped", reason)
            self.check("perf.allreduce", "skipped", reason)
            return
        n = 8192
        dev = torch.device("cuda:0")
        saved = _save_tf32(torch)
        try:
            for label, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                                       ("bf16", torch.bfloat16, False)):
                _set_tf32(torch, tf32)
                a = torch.randn(n, n, device=dev, dtype=dtype)
                b = torch.randn(n, n, device=dev, dtype=dtype)
                secs = _time_cuda(torch, lambda a=a, b=b: a @ b, warmup=5, reps=20)
                tflops = 2 * n ** 3 / secs / 1e12
                self.doc["perf"][f"{label}_tflops"] = round(tflops, 1)
                self.check(f"perf.gemm_{label}", "passed", f"{tflops:.1f} TFLOP/s ({n}x{n}, median of 20)",
                           tflops=round(tflops, 1), n=n, ms=round(secs * 1e3, 3), metric=f"{label}_tflops")
                del a, b
        finally:
            _restore_tf32(torch, saved)
            torch.cuda.empty_cache()
        nccl = (self.doc.get("distributed") or {}).get("nccl")
        if torch.cuda.device_count() < 2:
            self.check("perf.allreduce", "skipped", "needs 2+ GPUs")
        elif nccl and nccl.get("figures", {}).get("busbw_gbps"):
            bw = nccl["figures"]["busbw_gbps"]
            self.doc["perf"]["allreduce_busbw_gbps"] = bw
            self.check("perf.allreduce", "passed", f"NCCL all_reduce bus bandwidth {bw} GB/s",
                       busbw_gbps=bw, metric="allreduce_busbw_gbps")
        else:
            res = _run_dist(torch.cuda.device_count(), "nccl", perf=True, timeout=self.remaining(240))
            bw = res["figures"].get("busbw_gbps")
            if bw:
                self.doc["perf"]["allreduce_busbw_gbps"] = bw
                self.check("perf.allreduce", "passed", f"NCCL all_reduce bus bandwidth {bw} GB/s",
                           busbw_gbps=bw, metric="allreduce_busbw_gbps")
            else:
                self.check("perf.allreduce", "failed", res["reason"])


# ---------------------------------------------------------------------------------------------------------------
# helpers that touch torch / processes
# ---------------------------------------------------------------------------------------------------------------


def _which(name):
    for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/sbin"]:
        p = os.path.join(d, name)
        if d and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def _rmtree(path):
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _find_tf32_hook():
    try:
        import site

        dirs = site.getsitepackages()
    except Exception:
        dirs = []
    for d in dirs + [p for p in sys.path if p.endswith("-packages")]:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            if n.endswith(".pth") and "tf32" in n:
                return os.path.join(d, n)
    return None


def tf32_state(torch) -> dict:
    """Both the legacy allow_tf32 flags and the 2.9+ fp32_precision API, read without changing anything."""
    import warnings

    st: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key, getter in (
            ("matmul_allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32),
            ("cudnn_allow_tf32", lambda: torch.backends.cudnn.allow_tf32),
            ("float32_matmul_precision", lambda: torch.get_float32_matmul_precision()),
            ("fp32_precision", lambda: torch.backends.fp32_precision),
            ("matmul_fp32_precision", lambda: torch.backends.cuda.matmul.fp32_precision),
            ("cudnn_fp32_precision", lambda: torch.backends.cudnn.fp32_precision),
            ("cudnn_conv_fp32_precision", lambda: torch.backends.cudnn.conv.fp32_precision),
        ):
            try:
                val = getter()
                st[key] = val if isinstance(val, (bool, str, int, float)) or val is None else str(val)
            except Exception as exc:
                st[key] = None
                st.setdefault("errors", {})[key] = f"{type(exc).__name__}: {exc}"[:200]
    mp = st.get("matmul_fp32_precision")
    st["matmul_tf32"] = bool(st.get("matmul_allow_tf32")) or mp == "tf32" or (
        mp in (None, "none") and st.get("float32_matmul_precision") in ("high", "medium"))
    st["has_fp32_precision_api"] = "matmul_fp32_precision" not in st.get("errors", {})
    return st


def _save_tf32(torch):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        saved = {"allow": torch.backends.cuda.matmul.allow_tf32,
                 "prec": torch.get_float32_matmul_precision()}
        try:
            saved["fp32"] = torch.backends.cuda.matmul.fp32_precision
        except Exception:
            pass
    return saved


def _set_tf32(torch, on):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"
        except Exception:
            torch.backends.cuda.matmul.allow_tf32 = on


def _restore_tf32(torch, saved):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "fp32" in saved:
            try:
                torch.backends.cuda.matmul.fp32_precision = saved["fp32"]
                return
            except Exception:
                pass
        torch.backends.cuda.matmul.allow_tf32 = saved["allow"]


def _time_cuda(torch, fn, warmup=3, reps=10):
    """Median seconds per call, timed with CUDA events after warm-up."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return statistics.median(times)


def _amp_train(torch, device, dtype_name, use_scaler, steps=12):
    dtype = torch.float16 if dtype_name == "fp16" else torch.bfloat16
    t0 = time.time()
    try:
        torch.manual_seed(0)
        x = torch.randn(256, 64, device=device)
        w_true = torch.randn(64, 1, device=device)
        y = x @ w_true + 0.01 * torch.randn(256, 1, device=device)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        scaler = torch.amp.GradScaler(device, enabled=use_scaler) if use_scaler else None
        losses = []
        out_dtype = None
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            with torch.amp.autocast(device, dtype=dtype):
                pred = model(x)
                out_dtype = str(pred.dtype)
                loss = torch.nn.functional.mse_loss(pred.float(), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            losses.append(float(loss.detach().float().cpu()))
        fig = {"dtype": dtype_name, "device": device, "steps": steps, "first_loss": round(losses[0], 5),
               "last_loss": round(losses[-1], 5), "autocast_dtype": out_dtype,
               "seconds": round(time.time() - t0, 3)}
        if scaler is not None:
            fig["scaler_scale"] = float(scaler.get_scale())
        import math

        problems = []
        if not all(math.isfinite(v) for v in losses):
            problems.append("non-finite loss")
        elif not losses[-1] < losses[0]:
            problems.append(f"loss did not decrease ({losses[0]:.4g} -> {losses[-1]:.4g})")
        if out_dtype != str(dtype):
            problems.append(f"autocast produced {out_dtype}, not {dtype}")
        if scaler is not None:
            s = fig["scaler_scale"]
            if not (math.isfinite(s) and s >= 1.0):
                problems.append(f"GradScaler scale {s} is not a finite value >= 1")
        if problems:
            return {"status": "failed", "reason": "; ".join(problems), "figures": fig}
        return {"status": "passed",
                "reason": f"{device} {dtype_name} autocast: loss {losses[0]:.4g} -> {losses[-1]:.4g}"
                + (f", scale {fig['scaler_scale']:g}" if scaler is not None else ""), "figures": fig}
    except Exception as exc:
        return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:1000], "figures": {}}


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _script_path():
    return os.path.abspath(__file__)


def _run_dist(world, backend, perf, timeout):
    """Spawn one worker process per rank (this script, --dist-worker) and collect results + NCCL log."""
    port = _free_port()
    env = dict(os.environ)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world))
    if backend == "nccl":
        env.setdefault("NCCL_DEBUG", "INFO")
    else:
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    t0 = time.time()
    procs = []
    logs = []
    for rank in range(world):
        e = dict(env, RANK=str(rank), LOCAL_RANK=str(rank))
        fh = tempfile.TemporaryFile(mode="w+")
        logs.append(fh)
        procs.append(subprocess.Popen([sys.executable, _script_path(), "--dist-worker", backend]
                                      + (["--perf"] if perf else []),
                                      stdout=fh, stderr=subprocess.STDOUT, env=e, start_new_session=True))
        _CHILDREN.append(procs[-1])
    timed_out = False
    end = time.time() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(1.0, end - time.time()))
        except subprocess.TimeoutExpired:
            timed_out = True
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, 9)
            except OSError:
                p.kill()
            p.wait()
    results, text = [], ""
    for rank, fh in enumerate(logs):
        fh.seek(0)
        out = fh.read()
        fh.close()
        text += "".join(f"[{rank}] {line}\n" for line in out.splitlines())
        for line in out.splitlines():
            if line.startswith(RESULT_MARK):
                try:
                    results.append(json.loads(line[len(RESULT_MARK):]))
                except ValueError:
                    pass
    seconds = round(time.time() - t0, 2)
    nccl = parse_nccl_log(text) if backend == "nccl" else None
    fig = {"backend": backend, "world_size": world, "seconds": seconds,
           "returncodes": [p.returncode for p in procs]}
    if nccl:
        fig.update(transports=nccl["transports"], transport=nccl["summary"], nccl_version=nccl["version"],
                   channels=len(nccl["channels"]))
    bws = [r.get("busbw_gbps") for r in results if r.get("busbw_gbps")]
    if bws:
        fig["busbw_gbps"] = round(min(bws), 1)
    out = {"figures": fig, "log_tail": text[-6000:], "results": results}
    if timed_out:
        out.update(status="failed", reason=f"{backend} all_reduce timed out after {timeout:.0f} s")
    elif len(results) != world or not all(r.get("ok") for r in results):
        errs = [r.get("error") for r in results if r.get("error")]
        tail = [ln for ln in text.splitlines() if ln.strip()][-3:]
        out.update(status="failed", reason=f"{backend} all_reduce over {world} process(es) failed: "
                   + ("; ".join(errs) if errs else " | ".join(tail))[-1200:])
    else:
        how = f" via {nccl['summary']}" if nccl and nccl["transports"] else (
            " (single GPU: no peer transport)" if backend == "nccl" and world == 1 else "")
        out.update(status="passed", reason=f"{backend} all_reduce correct over {world} process(es){how}")
    return out


def dist_worker(backend, perf):
    """One rank: init, all_reduce, check, optionally measure bus bandwidth; print a RESULT line."""
    res = {"rank": int(os.environ.get("RANK", "0")), "ok": False}
    try:
        import torch
        import torch.distributed as dist

        rank, world = res["rank"], int(os.environ["WORLD_SIZE"])
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
            import inspect

            try:  # device_id (torch 2.3+) binds the communicator eagerly; inspect follows decorators
                bind = "device_id" in inspect.signature(dist.init_process_group).parameters
            except (TypeError, ValueError):
                bind = False
            dist.init_process_group("nccl", rank=rank, world_size=world, **({"device_id": device} if bind else {}))
        else:
            device = torch.device("cpu")
            dist.init_process_group("gloo", rank=rank, world_size=world)
        t = torch.full((1 << 20,), float(rank + 1), device=device)
        dist.all_reduce(t)
        expected = world * (world + 1) / 2
        res["ok"] = bool(torch.all(t == expected).item())
        res["value"] = float(t[0].item())
        res["expected"] = expected
        if not res["ok"]:
            res["error"] = f"rank {rank}: all_reduce gave {t[0].item()}, want {expected}"
        if perf and backend == "nccl" and world > 1:
            nbytes = 1 << 28
            buf = torch.ones(nbytes // 4, device=device)
            for _ in range(5):
                dist.all_reduce(buf)
            torch.cuda.synchronize()
            times = []
            for _ in range(20):
                dist.barrier()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                dist.all_reduce(buf)
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e) / 1e3)
            sec = statistics.median(times)
            res["algbw_gbps"] = round(nbytes / sec / 1e9, 1)
            res["busbw_gbps"] = round(nbytes / sec / 1e9 * 2 * (world - 1) / world, 1)
        dist.barrier()
        dist.destroy_process_group()
    except Exception as exc:
        res["error"] = f"rank {res['rank']}: {type(exc).__name__}: {exc}"[:800]
    sys.stdout.flush()
    print(RESULT_MARK + json.dumps(res), flush=True)


def _run_child(args, timeout):
    try:
        out = subprocess.run([sys.executable, _script_path()] + args, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"child probe timed out after {timeout:.0f} s"}
    try:
        return json.loads(out.stdout)
    except ValueError:
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        return {"error": f"child probe exited {out.returncode}: {' | '.join(tail)}"[:1500]}


_CPP_EXT_SRC = r"""
#include <Python.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>
static at::Tensor add_one(const at::Tensor& x) { return x.add(1); }
TORCH_LIBRARY(ibprobe, m) { m.def("add_one", &add_one); }
"""

_CU_SRC = r"""
#include <cstdio>
__global__ void fill(int *out, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = 1; }
int main() {
  const int n = 1024; int *d = nullptr; int h[n];
  if (cudaMalloc(&d, n * sizeof(int)) != cudaSuccess) { printf("cudaMalloc failed\n"); return 2; }
  fill<<<(n + 255) / 256, 256>>>(d, n);
  if (cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess) { printf("copy failed\n"); return 3; }
  int s = 0; for (int i = 0; i < n; ++i) s += h[i];
  printf("ok %d\n", s); return 0;
}
"""


def _compiler_error(text: str) -> str:
    """The lines that say what went wrong in a compiler/ninja log (`fatal error: Python.h: No such file`)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errs = [ln for ln in lines if re.search(r"\berror:", ln, re.I)] or [
        ln for ln in lines if re.search(r"\berror\b", ln, re.I) and " -c " not in ln]
    picked = errs[:3] or lines[-3:]
    return " | ".join(picked)[:1000]


def _find_nvcc():
    p = _which("nvcc")
    if p:
        return p
    for c in ("/usr/local/cuda/bin/nvcc",):
        if os.path.isfile(c):
            return c
    for d in [p for p in sys.path if p.endswith("-packages")]:
        nv = os.path.join(d, "nvidia")
        try:
            subs = sorted(os.listdir(nv))
        except OSError:
            continue
        for s in subs:
            c = os.path.join(nv, s, "bin", "nvcc")
            if os.path.isfile(c):
                return c
    return None


class _Jupyter:
    """Start JupyterLab on a free loopback port with a random token; check HTTP with and without the token."""

    def __init__(self):
        self.proc = None
        self.port = None
        self.token = None
        self.error = None
        self.t0 = None
        self.log = None

    def start(self):
        exe = _which("jupyter") or (os.path.join(os.path.dirname(sys.executable), "jupyter")
                                    if os.path.exists(os.path.join(os.path.dirname(sys.executable), "jupyter"))
                                    else None)
        if not exe:
            self.error = "jupyter not found in PATH"
            return
        import secrets

        self.port, self.token = _free_port(), secrets.token_hex(16)
        self.root = tempfile.mkdtemp(prefix="ibprobe-jl-")
        self.log = tempfile.TemporaryFile(mode="w+")
        cmd = [exe, "lab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}", "--port-retries=0",
               f"--IdentityProvider.token={self.token}", f"--ServerApp.token={self.token}",
               f"--ServerApp.root_dir={self.root}"]
        if os.getuid() == 0:
            cmd.append("--allow-root")
        env = dict(os.environ, HOME=self.root if not os.access(os.path.expanduser("~"), os.W_OK)
                   else os.path.expanduser("~"), JUPYTER_RUNTIME_DIR=os.path.join(self.root, "rt"))
        env.pop("JUPYTER_TOKEN", None)  # the image's own token must not override the probe's
        self.t0 = time.time()
        try:
            self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
            _CHILDREN.append(self.proc)
        except OSError as exc:
            self.error = f"cannot start jupyter: {exc}"

    def _get(self, path, token):
        import urllib.error
        import urllib.request

        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        if token:
            req.add_header("Authorization", f"token {token}")
        try:
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def check(self, timeout=90):
        if self.error:
            return {"status": "failed", "reason": self.error}
        end = time.time() + timeout
        status = None
        while time.time() < end:
            if self.proc.poll() is not None:
                return {"status": "failed", "reason": f"jupyter lab exited {self.proc.returncode}: {self._tail()}"}
            try:
                status = self._get("/api/status", self.token)
                break
            except OSError:
                time.sleep(0.3)
        if status is None:
            return {"status": "failed", "reason": f"jupyter lab did not answer within {timeout:.0f} s: {self._tail()}"}
        startup = round(time.time() - self.t0, 2)
        try:
            no_token = self._get("/api/status", None)
            lab = self._get(f"/lab?token={self.token}", None)
        except OSError as exc:
            return {"status": "failed", "reason": f"HTTP error: {exc}"}
        fig = {"port": self.port, "with_token": status, "without_token": no_token, "lab_page": lab,
               "startup_seconds": startup}
        if status == 200 and lab == 200 and no_token in (401, 403):
            return {"status": "passed", "reason": f"HTTP {status} with token, {no_token} without", "figures": fig}
        return {"status": "failed", "reason": f"with token {status} (want 200), /lab {lab} (want 200), "
                f"without token {no_token} (want 401/403)", "figures": fig}

    def _tail(self):
        if not self.log:
            return ""
        self.log.seek(0)
        return " | ".join(ln.strip() for ln in self.log.read().splitlines()[-3:])[-800:]

    def stop(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 15)
                self.proc.wait(timeout=5)
            except (OSError, subprocess.SubprocessError):
                try:
                    os.killpg(self.proc.pid, 9)
                except OSError:
                    pass
        if getattr(self, "root", None):
            _rmtree(self.root)


def _sshd_check():
    sshd = _which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if not sshd:
        return {"status": "failed", "reason": "sshd not found"}
    fig = {"sshd": sshd}
    out = subprocess.run([sshd, "-t"], capture_output=True, text=True, timeout=30)
    key_args = []
    work = None
    if out.returncode != 0 and ("host key" in out.stderr.lower() or "no hostkeys" in out.stderr.lower()):
        # non-root cannot read the host keys (or the image generates them at start): test with a throwaway key
        work = tempfile.mkdtemp(prefix="ibprobe-ssh-")
        keygen = _which("ssh-keygen") or "/usr/bin/ssh-keygen"
        k = subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(work, "k")],
                           capture_output=True, text=True, timeout=30)
        if k.returncode == 0:
            key_args = ["-h", os.path.join(work, "k")]
            fig["first_try"] = out.stderr.strip()[-300:]
            out = subprocess.run([sshd, "-t"] + key_args, capture_output=True, text=True, timeout=30)
    fig["config_test_rc"] = out.returncode
    try:
        if out.returncode != 0:
            return {"status": "failed", "reason": f"sshd -t failed: {out.stderr.strip()[-800:]}", "figures": fig}
        eff = subprocess.run([sshd, "-T"] + key_args, capture_output=True, text=True, timeout=30)
        if eff.returncode == 0:
            conf = parse_sshd_T(eff.stdout)
            fig["source"] = "sshd -T"
        else:
            texts = []
            for path in ["/etc/ssh/sshd_config"] + sorted(
                    os.path.join("/etc/ssh/sshd_config.d", f) for f in _listdir("/etc/ssh/sshd_config.d")
                    if f.endswith(".conf")):
                try:
                    with open(path) as fh:
                        texts.append(fh.read())
                except OSError:
                    pass
            conf = parse_sshd_config_files(texts[1:] + texts[:1])  # Include of sshd_config.d comes first
            fig["source"] = "config files"
        pa = conf.get("passwordauthentication", "yes").lower()
        fig["passwordauthentication"] = pa
        fig["permitrootlogin"] = conf.get("permitrootlogin")
        if pa != "no":
            return {"status": "failed", "reason": f"PasswordAuthentication is {pa!r}, want 'no'", "figures": fig}
        return {"status": "passed", "reason": "sshd -t passed; PasswordAuthentication no", "figures": fig}
    finally:
        if work:
            _rmtree(work)


def _listdir(d):
    try:
        return os.listdir(d)
    except OSError:
        return []


# ---------------------------------------------------------------------------------------------------------------
# table + main
# ---------------------------------------------------------------------------------------------------------------


def render_table(doc: dict) -> str:
    v = doc.get("versions") or {}
    g = doc.get("gpu") or {}
    lines = [
        "torch {t}  cuda {c}  cudnn {d}  nccl {n}  python {p}  te {te}".format(
            t=v.get("torch"), c=v.get("cuda"), d=v.get("cudnn"), n=v.get("nccl"), p=v.get("python"),
            te=v.get("transformer_engine")),
        "gpus: " + (", ".join(f"{d['index']}:{d['name']}({d['sm']})" for d in g.get("devices", [])) or "none"),
        "",
        f"{'CHECK':<24} {'STATUS':<8} REASON",
    ]
    for c in doc.get("checks", []):
        lines.append(f"{c['name']:<24} {c['status']:<8} {c.get('reason', '')[:100]}")
    counts = {s: sum(1 for c in doc.get("checks", []) if c["status"] == s) for s in ("passed", "failed", "skipped")}
    lines.append("")
    lines.append(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped in "
                 f"{(doc.get('probe') or {}).get('seconds', '?')} s")
    return "\n".join(lines)


def _write_all(fd, data: bytes):
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _watchdog(seconds, probe, out_fd):
    """On overrun, emit what was gathered so far (marked) and exit: the caller always gets JSON."""

    def fire():
        for p in _CHILDREN:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, 9)
                except OSError:
                    pass
        probe.doc["probe"]["errors"].append(f"probe timed out after {seconds:.0f} s")
        probe.doc["probe"]["timed_out"] = True
        try:
            _write_all(out_fd, json.dumps(probe.doc, default=str).encode() + b"\n")
        finally:
            os._exit(3)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()
    return t


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="imagebuild in-image probe (prints one JSON document)")
    ap.add_argument("--sections", default=",".join(DEFAULT_SECTIONS),
                    help=f"comma-separated subset of {','.join(SECTIONS)} (default: all but dev, perf)")
    ap.add_argument("--perf", action="store_true", help="add the perf section (GPU GEMM, NCCL bandwidth)")
    ap.add_argument("--timeout", type=float, default=0, help="overall seconds; on overrun emit partial JSON")
    ap.add_argument("--output", help="also write the JSON to this file")
    ap.add_argument("--table", metavar="FILE", help="render a saved result as a table and exit")
    ap.add_argument("--dist-worker", metavar="BACKEND", help=argparse.SUPPRESS)
    ap.add_argument("--te-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.table:
        with open(args.table) as fh:
            print(render_table(json.load(fh)))
        return 0
    if args.dist_worker:
        dist_worker(args.dist_worker, args.perf)
        return 0

    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    if "all" in sections:
        sections = list(SECTIONS)
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)}; valid: {', '.join(SECTIONS)}")
    if args.perf and "perf" not in sections:
        sections.append("perf")

    # stdout carries only the JSON: everything else (NCCL logs, warnings, C++ prints) goes to stderr
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    deadline = time.time() + args.timeout if args.timeout else None
    probe = Probe(sections, perf=args.perf, deadline=deadline)
    if args.timeout:
        _watchdog(args.timeout, probe, out_fd)
    if args.te_child:
        probe.te_child()
    else:
        probe.run()
    text = json.dumps(probe.doc, default=str, indent=None)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text)
    _write_all(out_fd, text.encode() + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
