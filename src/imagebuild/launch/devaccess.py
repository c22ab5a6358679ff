"""Dev-image access for `imagebuild run`: JupyterLab with a fresh token, or the key-only sshd with the caller's public
key. Host networking only (never a bridge network), so both listen on 127.0.0.1 of the host, on a free port or the
one asked for (checked before any container exists)."""

from __future__ import annotations

import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path

from imagebuild.errors import UsageError
from imagebuild.pasteable import shell_join

HOST = "127.0.0.1"
KEY_PREFIXES = ("ssh-", "ecdsa-", "sk-ssh-", "sk-ecdsa-")
KEY_PREFERENCE = ("id_ed25519.pub", "id_ecdsa.pub", "id_ed25519_sk.pub", "id_ecdsa_sk.pub", "id_rsa.pub")


@dataclass(frozen=True)
class Access:
    """What the container runs and what the user is told once it answers."""

    kind: str  # "jupyter" | "ssh"
    port: int
    command: list[str]
    environment: dict[str, str] = field(default_factory=dict)
    run_as_root: bool = False  # sshd must start as root; it drops to the login user per session
    message: str = ""  # the URL / the ssh command, printed on stdout once the port answers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def check_port(port: int, option: str = "--port") -> int:
    """The port when nothing listens on HOST:port; UsageError otherwise."""
    if not 1 <= port <= 65535:
        raise UsageError(f"{option} {port}: not a TCP port (1-65535)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError as exc:
            raise UsageError(f"{option} {port}: {HOST}:{port} is in use ({exc.strerror or exc}); choose another "
                             f"port, or leave {option} out for a free one") from None
    return port


def public_keys(ssh_key: Path | None, home: Path) -> tuple[str, list[Path]]:
    """The authorized_keys text: --ssh-key FILE, else every ~/.ssh/*.pub. UsageError when there is none, or when the
    file is not an OpenSSH public key (a private key given by mistake is refused, never copied anywhere)."""
    if ssh_key is not None:
        files = [ssh_key]
    else:
        found = sorted((home / ".ssh").glob("*.pub"))
        files = sorted(found, key=lambda p: (KEY_PREFERENCE.index(p.name) if p.name in KEY_PREFERENCE else 99,
                                             p.name))
        if not files:
            raise UsageError(f"--ssh needs your public key: no {home}/.ssh/*.pub found; create one with "
                             "`ssh-keygen -t ed25519` or give --ssh-key FILE")
    lines: list[str] = []
    for path in files:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--ssh-key {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
        if "PRIVATE KEY" in text:
            raise UsageError(f"--ssh-key {path}: this is a private key; give the public one ({path}.pub)")
        keys = [ln.strip() for ln in text.splitlines() if ln.strip().startswith(KEY_PREFIXES)]
        if not keys:
            raise UsageError(f"--ssh-key {path}: no OpenSSH public key in it (want a line like 'ssh-ed25519 AAAA...')")
        lines += keys
    return "\n".join(lines) + "\n", files


def jupyter(port: int, *, as_root: bool) -> Access:
    """JupyterLab on HOST:port with a fresh token (the image's config refuses an empty one)."""
    token = secrets.token_hex(24)
    cmd = ["jupyter", "lab", f"--ServerApp.ip={HOST}", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           "--no-browser"]
    if as_root:  # the caller is root, so the container runs as root: Jupyter wants to be told
        cmd.append("--allow-root")
    return Access("jupyter", port, cmd, {"JUPYTER_TOKEN": token},
                  message=f"http://{HOST}:{port}/lab?token={token}")


# Runs as root in the container: make the image's user (uid `IMAGEBUILD_LOGIN_UID`, 1000 in our images) carry the
# caller's UID/GID so files it creates in /workspace are the caller's, install the keys, then start-sshd.
SSHD_SCRIPT = r"""set -eu
user="$(getent passwd "$IMAGEBUILD_LOGIN_UID" | cut -d: -f1)"
[ -n "$user" ] || { echo "no user with uid $IMAGEBUILD_LOGIN_UID in the image" >&2; exit 1; }
if [ "$IMAGEBUILD_CALLER_UID" != 0 ] && [ "$IMAGEBUILD_CALLER_UID" != "$IMAGEBUILD_LOGIN_UID" ]; then
    groupmod -o -g "$IMAGEBUILD_CALLER_GID" "$(id -gn "$user")"
    usermod -o -u "$IMAGEBUILD_CALLER_UID" "$user"
fi
home="$(getent passwd "$user" | cut -d: -f6)"
install -d -m 0700 -o "$user" -g "$(id -g "$user")" "$home/.ssh"
printf '%s' "$IMAGEBUILD_SSH_KEYS" > "$home/.ssh/authorized_keys"
chown "$user:$(id -g "$user")" "$home/.ssh/authorized_keys"
chmod 0600 "$home/.ssh/authorized_keys"
echo "imagebuild: ssh login user: $user" >&2
exec start-sshd -p "$IMAGEBUILD_SSH_PORT" -o ListenAddress=""" + HOST + "\n"


def ssh(port: int, keys: str, *, login_uid: int, caller: tuple[int, int], login_name: str = "ml") -> Access:
    """sshd (key-only, host keys generated in the container) on HOST:port, accepting `keys` for the image's user."""
    env = {"IMAGEBUILD_SSH_KEYS": keys, "IMAGEBUILD_SSH_PORT": str(port), "IMAGEBUILD_LOGIN_UID": str(login_uid),
           "IMAGEBUILD_CALLER_UID": str(caller[0]), "IMAGEBUILD_CALLER_GID": str(caller[1])}
    # host keys are new in every container: nothing to check them against, and a reused port would clash in
    # ~/.ssh/known_hosts, hence a throwaway known_hosts file
    client = ["ssh", "-p", str(port), "-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no",
              f"{login_name}@{HOST}"]
    return Access("ssh", port, ["sh", "-c", SSHD_SCRIPT], env, run_as_root=True, message=shell_join(client))


def port_answers(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False
