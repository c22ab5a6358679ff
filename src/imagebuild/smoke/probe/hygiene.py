"""hygiene: what an image must not carry. No SSH host keys (every container built from it would share them; the dev
image generates its keys per container in start-sshd), nothing left in /tmp or /var/tmp, no pip cache in any home
directory, nothing under /root/.cache, no apt caches (downloaded .debs, package lists, pkgcache.bin).

The rule is what the image may contain, not when a file appeared: any host key, any entry of /tmp or /var/tmp but
the probe's own directory and the empty X11/ICE socket directories some packages create, any cache fails. An
earlier version let files whose inode change time was newer than the container's start pass as "created by this
container"; that judged layer files by timestamps (the engine's clock, its storage driver, a clock step in a VM
between build and test), and a derived layer (`FROM <image>` + `USER root` + `RUN ssh-keygen -A`) could pass.
So the suite runs this section first, as root (`docker exec -u root`, else /root cannot be read and what lies there
is unknown: reported as skipped), in a container nothing has written to yet (probe/table.py: where = root).
"""

from __future__ import annotations

import glob
import os

from probe.common import Probe

TMP_DIRS = ("/tmp", "/var/tmp")
# directories packages create in /tmp for sockets (X11, ICE): allowed while empty
TMP_ALLOWED_EMPTY = frozenset({".X11-unix", ".ICE-unix", ".XIM-unix", ".font-unix", ".Test-unix"})
APT_LISTS = "/var/lib/apt/lists"
APT_ARCHIVES = "/var/cache/apt/archives"
APT_KEEP = {"lock", "partial"}  # apt's lock file and its download directory (checked: must be empty)


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _unreadable(path: str) -> bool:
    return os.path.isdir(path) and not os.access(path, os.R_OK | os.X_OK)


def home_dirs(root: str = "/") -> list[str]:
    """Home directories of /etc/passwd's users and /root (those that exist), as paths inside `root`."""
    homes = {"/root"}
    try:
        with open(os.path.join(root, "etc/passwd"), errors="replace") as fh:
            for line in fh:
                fields = line.rstrip("\n").split(":")
                if len(fields) >= 6 and fields[5] not in ("", "/", "/nonexistent"):
                    homes.add(fields[5])
    except OSError:
        pass
    return sorted(h for h in homes if os.path.isdir(_at(root, h)))


def _at(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def findings(root: str = "/", own: str = "") -> dict[str, tuple[list[str], list[str]]]:
    """{check: (what the image must not contain but does, directories that could not be read)} under `root`
    (paths reported as inside the image). `own`: the probe's own directory, which the suite put in /tmp."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    ssh = _at(root, "/etc/ssh")
    out["ssh_host_keys"] = ([f"/etc/ssh/{name}" for name in _listdir(ssh) if name.startswith("ssh_host_")],
                            ["/etc/ssh"] if _unreadable(ssh) else [])

    left, unreadable = [], []
    for d in TMP_DIRS:
        if _unreadable(_at(root, d)):
            unreadable.append(d)
        for name in _listdir(_at(root, d)):
            path = os.path.join(d, name)
            if own and (own == path or own.startswith(path + os.sep)):
                continue
            if name in TMP_ALLOWED_EMPTY and os.path.isdir(_at(root, path)) and not _listdir(_at(root, path)):
                continue
            left.append(path)
    out["tmp"] = (left, unreadable)

    caches, unreadable = [], []
    for home in home_dirs(root):
        if _unreadable(_at(root, home)):
            unreadable.append(home)
        elif os.path.lexists(_at(root, os.path.join(home, ".cache", "pip"))):
            caches.append(os.path.join(home, ".cache", "pip"))
    caches += [os.path.join("/root/.cache", e) for e in _listdir(_at(root, "/root/.cache"))
               if os.path.join("/root/.cache", e) not in caches]
    out["pip_cache"] = (sorted(set(caches)), unreadable)

    apt = [os.path.join(APT_ARCHIVES, e) for e in _listdir(_at(root, APT_ARCHIVES)) if e.endswith(".deb")]
    apt += [os.path.join(APT_ARCHIVES, "partial", e) for e in _listdir(_at(root, os.path.join(APT_ARCHIVES,
                                                                                              "partial")))]
    apt += [os.path.join(APT_LISTS, e) for e in _listdir(_at(root, APT_LISTS)) if e not in APT_KEEP]
    apt += [os.path.join(APT_LISTS, "partial", e) for e in _listdir(_at(root, os.path.join(APT_LISTS, "partial")))]
    apt += ["/var/cache/apt/" + os.path.basename(x) for x in glob.glob(_at(root, "/var/cache/apt/*.bin"))]
    out["apt_cache"] = (sorted(apt), [])
    return out


WHAT = {
    "ssh_host_keys": ("SSH host keys (every container would share them)", "no SSH host keys in /etc/ssh"),
    "tmp": ("files left in " + " or ".join(TMP_DIRS), f"{' and '.join(TMP_DIRS)} empty"),
    "pip_cache": ("pip/user caches", "no ~/.cache/pip in any home directory, /root/.cache empty"),
    "apt_cache": ("apt caches", f"no .deb in {APT_ARCHIVES}, {APT_LISTS} empty, no pkgcache.bin"),
}


def run(p: Probe):
    own = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # .../D/probe.pyz/probe/x
    p.doc["hygiene"] = {"uid": os.getuid(), "probe_dir": own}
    for check, (found, unreadable) in findings("/", own).items():
        bad, good = WHAT[check]
        fig = {"found": found[:50], "unreadable": unreadable}
        if found:
            p.check(f"hygiene.{check}", "failed", f"{bad} in the image: " + ", ".join(found[:10])
                    + (f" (+{len(found) - 10} more)" if len(found) > 10 else ""), **fig)
        elif unreadable:
            p.check(f"hygiene.{check}", "skipped", f"cannot read {', '.join(unreadable)} as uid {os.getuid()} "
                    f"(run as root)", **fig)
        else:
            p.check(f"hygiene.{check}", "passed", good, **fig)
