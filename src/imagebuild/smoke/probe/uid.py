"""uid: the image works as whatever user runs it. The runner starts a second container as an arbitrary UID in group 0
(`--user 12345:0`, what OpenShift's restricted policy does: no /etc/passwd entry, group 0); there HOME and /tmp must
be writable and torch must import. In the image's default container the same checks hold for its own user."""

from __future__ import annotations

import os
import stat
import tempfile

from probe.common import NO_TORCH, Probe


def identity() -> dict:
    import pwd

    try:
        name = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        name = None  # no passwd entry: getpass.getuser() and `whoami` fail for this user
    return {"uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()), "passwd_name": name}


def describe_dir(path: str) -> dict:
    try:
        st = os.stat(path)
    except OSError as exc:
        return {"path": path, "error": exc.strerror or str(exc)}
    return {"path": path, "uid": st.st_uid, "gid": st.st_gid, "mode": oct(stat.S_IMODE(st.st_mode))}


def writable(path: str) -> tuple[bool, str]:
    """Really create (and remove) a file and a directory in `path`: os.access() alone misses read-only mounts."""
    try:
        fd, name = tempfile.mkstemp(prefix=".ibprobe-", dir=path)
        os.write(fd, b"x")
        os.close(fd)
        os.unlink(name)
        d = tempfile.mkdtemp(prefix=".ibprobe-", dir=path)
        os.rmdir(d)
    except OSError as exc:
        return False, f"{exc.strerror or exc} ({type(exc).__name__})"
    return True, ""


def torch_installed() -> bool:
    """torch's distribution metadata is there: a `No module named 'torch'` for this user is then a failure (its
    files unreadable to it), not an image without torch."""
    from importlib import metadata

    try:
        metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return False
    return True


def run(p: Probe):
    me = identity()
    p.doc["uid"] = dict(me)
    home = os.environ.get("HOME", "")
    # the temp dir programs use: $TMPDIR, else /tmp (tempfile.gettempdir() would quietly fall back to /var/tmp or
    # the working directory, so an unwritable /tmp would pass)
    for name, path in (("uid.home_writable", home), ("uid.tmp_writable", os.environ.get("TMPDIR") or "/tmp")):
        fig = dict(me, dir=describe_dir(path) if path else {})
        if not path:
            p.check(name, "failed", f"HOME is not set for uid {me['uid']}", **fig)
            continue
        ok, err = writable(path)
        who = f"uid {me['uid']} gid {me['gid']}" + ("" if me["passwd_name"] else " (no passwd entry)")
        d = fig["dir"]
        owner = f"owner {d.get('uid')}:{d.get('gid')} mode {d.get('mode')}" if "mode" in d else d.get("error", "")
        var = "HOME" if name == "uid.home_writable" else "temp dir"
        if ok:
            p.check(name, "passed", f"{var} {path} writable by {who}", **fig)
        else:
            p.check(name, "failed", f"{var} {path} not writable by {who}: {err} ({owner})", **fig)
    torch = p.import_torch()
    if torch is None:
        if (p.torch_error is None or "No module named" in p.torch_error) and not torch_installed():
            p.check("uid.torch_import", "skipped", NO_TORCH)
        else:
            p.check("uid.torch_import", "failed", f"import torch as uid {me['uid']}: {p.torch_error}"[:1500], **me)
        return
    try:
        ok = float(torch.ones(4).sum()) == 4.0
    except Exception as exc:
        p.check("uid.torch_import", "failed",
                f"torch imported as uid {me['uid']} but a CPU op failed: {type(exc).__name__}: {exc}"[:800])
        return
    p.check("uid.torch_import", "passed" if ok else "failed",
            f"torch {torch.__version__} imports and computes as uid {me['uid']} gid {me['gid']}", **me)
