"""Dev-image access for `imagebuild run`: JupyterLab with a fresh token, the key-only sshd with the caller's public
key, VS Code (code-server) with a fresh password, or several of them in one container (`combine`). Host networking
only (never a bridge network), so each listens on 127.0.0.1 of the host, on a free port or the one asked for (checked
before any container exists)."""

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

    kind: str  # "jupyter" | "ssh" | "vscode", or the kinds of a combined access joined by "+"
    port: int
    command: list[str]
    environment: dict[str, str] = field(default_factory=dict)
    run_as_root: bool = False  # sshd must start as root; it drops to the login user per session
    message: str = ""  # the URL / the ssh command, printed on stdout once the port answers
    parts: tuple[Access, ...] = ()  # a combined access (`combine`): the servers it starts, each announced alone

    def servers(self) -> tuple[Access, ...]:
        """The servers this container runs: its parts, or itself."""
        return self.parts or (self,)


def free_port(taken: tuple[int, ...] = ()) -> int:
    """A port nothing listens on now, other than `taken` (the ports already handed to this container's servers)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            port = int(s.getsockname()[1])
        if port not in taken:
            return port


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


VSCODE_LABEL = "io.imagebuild.code-server"  # the code-server release a dev image holds (render/image.py sets it)
VSCODE_PASSWORD_ENV = "PASSWORD"  # code-server reads its password from here (never from argv, where ps shows it)


def vscode(port: int, folder: str) -> Access:
    """VS Code (code-server) on HOST:port with a fresh password, opening `folder`; never `--auth none`."""
    password = secrets.token_urlsafe(24)
    cmd = ["code-server", "--bind-addr", f"{HOST}:{port}", "--auth", "password", "--disable-telemetry",
           "--disable-update-check", folder]
    return Access("vscode", port, cmd, {VSCODE_PASSWORD_ENV: password},
                  message=f"http://{HOST}:{port}/?folder={folder} (password: {password})")


# The image's environment that ssh sessions get too (sshd gives a session its own PATH, without /opt/venv/bin, and
# none of the image's ENV): `ssh ... python` must find the image's Python as `docker exec` does. Never a secret of
# this run (IMAGEBUILD_SSH_KEYS, JUPYTER_TOKEN, PASSWORD): only these names.
SESSION_ENV = ("PATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "CUDA_HOME", "LANG", "LC_ALL", "PYTHONUNBUFFERED", "PIP_CERT",
               "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "PIP_DISABLE_PIP_VERSION_CHECK", "PIP_NO_CACHE_DIR",
               "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "IMAGEBUILD_TF32",
               "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")

# Runs as root in the container: make the image's user (uid `IMAGEBUILD_LOGIN_UID`, 1000 in our images) carry the
# caller's UID/GID so files it creates in /workspace are the caller's, install the keys, then start-sshd.
SSHD_SETUP = r"""set -eu
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
envs=""
for name in """ + " ".join(SESSION_ENV) + r"""; do
    eval "value=\${$name-}"
    case "$value" in "" | *'"'* | *'\'*) continue ;; esac
    envs="$envs \"$name=$value\""
done
[ -z "$envs" ] || echo "SetEnv$envs" > /etc/ssh/sshd_config.d/05-imagebuild-env.conf
echo "imagebuild: ssh login user: $user" >&2
"""
SSHD_START = 'start-sshd -p "$IMAGEBUILD_SSH_PORT" -o ListenAddress=' + HOST
SSHD_SCRIPT = SSHD_SETUP + "exec " + SSHD_START + "\n"


def ssh(port: int, keys: str, *, login_uid: int, caller: tuple[int, int], login_name: str = "ml") -> Access:
    """sshd (key-only, host keys generated in the container) on HOST:port, accepting `keys` for the image's user."""
    env = {"IMAGEBUILD_SSH_KEYS": keys, "IMAGEBUILD_SSH_PORT": str(port), "IMAGEBUILD_LOGIN_UID": str(login_uid),
           "IMAGEBUILD_CALLER_UID": str(caller[0]), "IMAGEBUILD_CALLER_GID": str(caller[1])}
    # host keys are new in every container: nothing to check them against, and a reused port would clash in
    # ~/.ssh/known_hosts, hence a throwaway known_hosts file
    client = ["ssh", "-p", str(port), "-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no",
              f"{login_name}@{HOST}"]
    return Access("ssh", port, ["sh", "-c", SSHD_SCRIPT], env, run_as_root=True, message=shell_join(client))


# Several servers in one container (bash: `wait -n`): each started in the background in a process group of its own
# (`set -m`), the container's life that of the first to exit (the others' groups are stopped then), SIGTERM/Ctrl-C
# passed on to all of them. With sshd the script runs as root: the login user is set up first (SSHD_SETUP), then every
# other server runs as that user (setpriv, util-linux).
SUPERVISE_START = """set -m
pids=""
stop() { for p in $pids; do kill -TERM -- "-$p" 2>/dev/null || true; done; }
trap 'stop; wait; exit 143' TERM INT
"""
SUPERVISE_END = """wait -n && rc=0 || rc=$?
echo "imagebuild: a server exited (status $rc); stopping the others" >&2
stop
wait || true
exit "$rc"
"""
AS_LOGIN_USER = ('as_user() { if [ "$IMAGEBUILD_CALLER_UID" = 0 ]; then "$@"; else HOME="$home" USER="$user" '
                 'setpriv --reuid="$(id -u "$user")" --regid="$(id -g "$user")" --init-groups -- "$@"; fi; }\n')


def combine(accesses: list[Access]) -> Access:
    """One container that runs every server of `accesses` (one of them alone is returned as it is)."""
    if len(accesses) == 1:
        return accesses[0]
    as_root = any(a.run_as_root for a in accesses)
    script = SSHD_SETUP + AS_LOGIN_USER if as_root else "set -eu\n"
    script += SUPERVISE_START
    for a in accesses:
        if a.kind == "ssh":
            line = SSHD_START
        else:
            line = ("as_user " if as_root else "") + shell_join(a.command)
        script += f"{line} &\npids=\"$pids $!\"\n"
    script += SUPERVISE_END
    env: dict[str, str] = {}
    for a in accesses:
        env.update(a.environment)
    return Access("+".join(a.kind for a in accesses), accesses[0].port, ["bash", "-c", script], env,
                  run_as_root=as_root, message="\n".join(a.message for a in accesses), parts=tuple(accesses))


def port_answers(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False
