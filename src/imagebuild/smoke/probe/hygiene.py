"""hygiene: what an image must not carry. No SSH host keys (every container built from it would share them; the dev
image generates its keys per container in start-sshd), nothing left in /tmp or /var/tmp, no pip cache in any home
directory, nothing under /root/.cache, no apt caches (downloaded .debs, package lists, pkgcache.bin).

Run it as root (the suite does: `docker exec -u root`), else /root cannot be read and what lies there is unknown
(reported as skipped). The container has been running before this section, and other checks may have written to
/tmp or generated host keys: only what was in the image counts. An entry counts as baked in when its inode change
time (ctime, which nothing in userspace can set) or one of its descendants' is older than the container's start:
files from image layers were extracted before the container existed.
"""

from __future__ import annotations

import glob
import os
import pwd

from probe.common import listdir

TMP_DIRS = ("/tmp", "/var/tmp")
APT_LISTS = "/var/lib/apt/lists"
APT_ARCHIVES = "/var/cache/apt/archives"
APT_KEEP = {"lock", "partial"}  # apt's lock file and its download directory (checked: must be empty)
WALK_LIMIT = 2000


def parse_proc_stat_starttime(text: str) -> int:
    """/proc/PID/stat -> field 22 (starttime, clock ticks since boot). The command name (field 2) may hold spaces
    and parentheses, so fields are counted after its last ')'."""
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[19])  # rest[0] is field 3


def parse_btime(text: str) -> int:
    """/proc/stat -> btime (boot time, seconds since the epoch)."""
    for line in text.splitlines():
        if line.startswith("btime "):
            return int(line.split()[1])
    raise ValueError("no btime line in /proc/stat")


def container_start() -> float | None:
    """Wall-clock start of PID 1 (the container's init), or None when /proc does not tell."""
    try:
        with open("/proc/1/stat") as fh:
            ticks = parse_proc_stat_starttime(fh.read())
        with open("/proc/stat") as fh:
            boot = parse_btime(fh.read())
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def oldest_ctime(path: str) -> float | None:
    """The oldest ctime of `path` and (for a directory) what lies under it, up to WALK_LIMIT entries."""
    try:
        oldest = os.lstat(path).st_ctime
    except OSError:
        return None
    if os.path.isdir(path) and not os.path.islink(path):
        n = 0
        for dirpath, dirs, files in os.walk(path):
            for name in dirs + files:
                n += 1
                try:
                    oldest = min(oldest, os.lstat(os.path.join(dirpath, name)).st_ctime)
                except OSError:
                    pass
            if n > WALK_LIMIT:
                break
    return oldest


def split_baked(paths, start: float | None, oldest=oldest_ctime) -> tuple[list[str], list[str]]:
    """paths -> (baked into the image, created in this container). Without a start time everything is baked."""
    baked: list[str] = []
    fresh: list[str] = []
    for path in paths:
        t = oldest(path)
        (fresh if start is not None and t is not None and t >= start else baked).append(path)
    return baked, fresh


def home_dirs() -> list[str]:
    homes = {"/root"}
    try:
        homes.update(pw.pw_dir for pw in pwd.getpwall() if pw.pw_dir and pw.pw_dir not in ("/", "/nonexistent"))
    except OSError:
        pass
    if os.environ.get("HOME"):
        homes.add(os.environ["HOME"])
    return sorted(h for h in homes if os.path.isdir(h))


def _unreadable(path: str) -> bool:
    return os.path.isdir(path) and not os.access(path, os.R_OK | os.X_OK)


def _status(p, name, baked, fresh, unreadable, what, ok_text):
    fig = {"found": baked[:50], "created_in_container": fresh[:20], "unreadable": unreadable}
    if baked:
        p.check(name, "failed", f"{what} in the image: " + ", ".join(baked[:10])
                + (f" (+{len(baked) - 10} more)" if len(baked) > 10 else ""), **fig)
    elif unreadable:
        p.check(name, "skipped", f"cannot read {', '.join(unreadable)} as uid {os.getuid()} (run as root)", **fig)
    else:
        p.check(name, "passed", ok_text + (f" ({len(fresh)} created by this container ignored)" if fresh else ""),
                **fig)


def run(p):
    start = container_start()
    own = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # .../D/probe.pyz/probe/x
    p.doc["hygiene"] = {"container_start": start, "uid": os.getuid(), "probe_dir": own}

    keys = sorted(glob.glob("/etc/ssh/ssh_host_*"))
    baked, fresh = split_baked(keys, start)
    _status(p, "hygiene.ssh_host_keys", baked, fresh, [d for d in ["/etc/ssh"] if _unreadable(d)],
            "SSH host keys (every container would share them)", "no SSH host keys baked in")

    entries = []
    for d in TMP_DIRS:
        entries += [os.path.join(d, e) for e in listdir(d)]
    entries = [e for e in entries if not (own == e or own.startswith(e + os.sep))]
    baked, fresh = split_baked(sorted(entries), start)
    _status(p, "hygiene.tmp", baked, fresh, [d for d in TMP_DIRS if _unreadable(d)],
            "files left in " + " or ".join(TMP_DIRS), f"{' and '.join(TMP_DIRS)} empty")

    caches, unreadable = [], []
    for home in home_dirs():
        if _unreadable(home):
            unreadable.append(home)
            continue
        pip_cache = os.path.join(home, ".cache", "pip")
        if os.path.lexists(pip_cache):
            caches.append(pip_cache)
    if os.path.isdir("/root/.cache") and listdir("/root/.cache"):
        caches += [os.path.join("/root/.cache", e) for e in listdir("/root/.cache")
                   if os.path.join("/root/.cache", e) not in caches]
    baked, fresh = split_baked(sorted(set(caches)), start)
    _status(p, "hygiene.pip_cache", baked, fresh, unreadable, "pip/user caches",
            f"no ~/.cache/pip in {len(home_dirs())} home directories, /root/.cache empty")

    apt = glob.glob(os.path.join(APT_ARCHIVES, "*.deb")) + glob.glob(os.path.join(APT_ARCHIVES, "partial", "*"))
    apt += [os.path.join(APT_LISTS, e) for e in listdir(APT_LISTS) if e not in APT_KEEP]
    apt += [os.path.join(APT_LISTS, "partial", e) for e in listdir(os.path.join(APT_LISTS, "partial"))]
    apt += glob.glob("/var/cache/apt/*.bin")
    baked, fresh = split_baked(sorted(apt), start)
    _status(p, "hygiene.apt_cache", baked, fresh, [], "apt caches",
            f"no .deb in {APT_ARCHIVES}, {APT_LISTS} empty, no pkgcache.bin")
