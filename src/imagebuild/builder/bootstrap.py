"""The `bootstrap` base source: an OS root filesystem built from a distribution mirror, imported into the engine.

`mmdebstrap --variant=minbase` (fallback: `debootstrap --variant=minbase` + tar) of `variant.os.codename` from
`variant.base.mirror or variant.os.mirror` with python3, python3-venv, ca-certificates, tini and
`variant.base.packages`, optionally from a snapshot date. apt trusts only the archive keys whose fingerprints
compat/data/os.yaml pins for that OS (exported from the packaged key file into a keyring of their own), so an
Ubuntu base bootstraps on a Debian host (no ubuntu-keyring package needed) and a wrong key fails before any package
is read. SOURCE_DATE_EPOCH (the snapshot date; else the caller's; else the newest `Date:` of the suites' InRelease
files) makes the root filesystem bit-reproducible for the same mirror state. The tar is loaded as a one-layer image
whose config we write (ociarchive.py: created = that SOURCE_DATE_EPOCH, not the import time), so the same inputs
give the same image ID on any engine; tagged `imagebuild-os/<os id>:<hash12>`, labelled
`io.imagebuild.bootstrap-hash=<hash>`. The image is reused
while the inputs (suites, mirror, components, packages, snapshot) are unchanged. Needs root.

This is how air-gapped sites build from an internal mirror, and the only way to get a base without a registry.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from imagebuild.compat import keys
from imagebuild.engine.store import ImageStore, as_store
from imagebuild.errors import ImagebuildError
from imagebuild.models import ResolvedVariant, platform_arch
from imagebuild.oci import Reference
from imagebuild.secrets import (
    has_credentials,
    redact,
    register_url_credentials,
    split_userinfo,
    strip_credentials,
)

if TYPE_CHECKING:
    from imagebuild.engine.store import EngineClient

BOOTSTRAP_FORMAT = "2"  # bump when the way the image is made changes (invalidates every bootstrap image); 2: own config
# apt: Debian's minbase has it (Priority: required), Ubuntu's does not, and every flavor installs with apt-get
REQUIRED_PACKAGES = ("python3", "python3-venv", "ca-certificates", "tini", "apt")
HASH_LABEL = "io.imagebuild.bootstrap-hash"
REPOSITORY = "imagebuild-os"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# keep the rootfs small: no man pages, docs (but licences) or translations; children inherit the dpkg filter
DPKG_FILTERS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
)
DEBIAN_DEFAULT_HOSTS = ("deb.debian.org", "ftp.debian.org", "httpredir.debian.org")
UBUNTU_DEFAULT_HOSTS = ("archive.ubuntu.com", "ports.ubuntu.com", "security.ubuntu.com")




_log = logging.getLogger(__name__)


class BootstrapError(ImagebuildError):
    pass


_running: set[subprocess.Popen[str]] = set()
_running_lock = threading.Lock()


def terminate_all() -> None:
    """Stop every bootstrap subprocess (interrupt handling)."""
    with _running_lock:
        procs = list(_running)
    for proc in procs:
        try:
            proc.terminate()
        except OSError:
            pass


@dataclass(frozen=True)
class BootstrapSpec:
    os_id: str
    family: str  # "debian" | "ubuntu"
    codename: str
    mirror: str  # may carry credentials: never hashed/labelled/logged in clear
    components: tuple[str, ...]
    packages: tuple[str, ...]
    snapshot: str | None = None
    variant: str = "minbase"
    repository: str = REPOSITORY  # not hashed: where the image is tagged (tests use their own)
    # not hashed (they decide trust, not content): pinned archive key fingerprints and the packaged key file
    archive_keys: tuple[str, ...] = ()
    keyring: str | None = None
    # the Debian architecture of the rootfs: mmdebstrap --architectures, the image config's `architecture`. Another
    # than the host's runs its maintainer scripts through QEMU (scripts/binfmt.sh registers it).
    architecture: str = "amd64"

    @property
    def is_ubuntu(self) -> bool:
        return self.family == "ubuntu" or "ubuntu" in urllib.parse.urlsplit(self.mirror).netloc + self.mirror

    def sources(self) -> list[str]:
        """One-line sources entries handed to mmdebstrap (mirror as given, credentials included)."""
        comps = " ".join(self.components)
        mirror = _snapshot_url(self.mirror, self.snapshot, self.is_ubuntu)
        lines = [f"deb {mirror} {self.codename} {comps}"]
        host = urllib.parse.urlsplit(self.mirror).hostname or ""
        default = host in (UBUNTU_DEFAULT_HOSTS if self.is_ubuntu else DEBIAN_DEFAULT_HOSTS)
        if default or self.snapshot:
            lines.append(f"deb {mirror} {self.codename}-updates {comps}")
            if self.is_ubuntu:
                lines.append(f"deb {mirror} {self.codename}-security {comps}")
            elif default:
                sec = _snapshot_url(self.mirror.rstrip("/") + "-security", self.snapshot, False, security=True)
                lines.append(f"deb {sec} {self.codename}-security {comps}")
        return lines

    def hash(self) -> str:
        doc = {
            "format": BOOTSTRAP_FORMAT,
            "os": self.os_id,
            "codename": self.codename,
            # credentials change nothing in the content: hash the sources without them
            "sources": [strip_credentials(s) for s in self.sources()],
            "packages": sorted(set(self.packages)),
            "snapshot": self.snapshot,
            "variant": self.variant,
            "dpkg": list(DPKG_FILTERS),
        }
        if self.architecture != "amd64":  # amd64 hashes (and so tags and image IDs) stay as they were
            doc["architecture"] = self.architecture
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    @property
    def tag(self) -> str:
        return f"{self.repository}/{self.os_id}:{self.hash()[:12]}"


def _snapshot_url(mirror: str, snapshot: str | None, ubuntu: bool, security: bool = False) -> str:
    if not snapshot:
        return mirror
    if "{snapshot}" in mirror:
        return mirror.replace("{snapshot}", snapshot)
    host = urllib.parse.urlsplit(mirror).hostname or ""
    if ubuntu and host in UBUNTU_DEFAULT_HOSTS:
        return f"http://snapshot.ubuntu.com/ubuntu/{snapshot}/"
    if host in DEBIAN_DEFAULT_HOSTS:
        return f"http://snapshot.debian.org/archive/{'debian-security' if security else 'debian'}/{snapshot}/"
    # an internal mirror: snapshots must be spelled in the URL ("{snapshot}"), or the mirror is the snapshot
    return mirror


def spec_for(variant: ResolvedVariant) -> BootstrapSpec:
    base, osinfo = variant.base, variant.os
    mirror = base.mirror or osinfo.mirror
    packages = tuple(dict.fromkeys((*REQUIRED_PACKAGES, *base.packages)))
    return BootstrapSpec(
        os_id=osinfo.id,
        family=osinfo.family,
        codename=osinfo.codename,
        mirror=mirror,
        components=tuple(osinfo.components) or ("main",),
        packages=packages,
        snapshot=base.snapshot,
        archive_keys=osinfo.archive_keys,
        keyring=osinfo.keyring,
        architecture=platform_arch(variant.platform),
    )


@dataclass
class BootstrapResult:
    image_id: str
    tag: str
    reused: bool
    seconds: float = 0.0
    tool: str = ""
    log_path: str | None = None


def find_existing(store: ImageStore, spec: BootstrapSpec) -> str | None:
    """Image ID of an existing bootstrap image for `spec` (tag + label must both match)."""
    h = spec.hash()
    info = store.inspect(spec.tag)
    if info is not None and ((info.get("Config") or {}).get("Labels") or {}).get(HASH_LABEL) == h:
        return str(info["Id"])
    for img in store.find({HASH_LABEL: h}):
        ref = Reference.parse(spec.tag)
        store.tag(img["Id"], ref.name, ref.tag or "latest")
        return str(img["Id"])
    return None


def choose_tool() -> str:
    for tool in ("mmdebstrap", "debootstrap"):
        if shutil.which(tool):
            return tool
    raise BootstrapError(
        "bootstrap base needs mmdebstrap or debootstrap on this machine (apt-get install mmdebstrap)"
    )


def _strip_credentials(spec: BootstrapSpec, tmp: Path) -> tuple[list[str], Path | None]:
    """Sources without credentials + an apt auth.conf (outside the rootfs) holding them."""
    sources = spec.sources()
    if not has_credentials(spec.mirror):
        return sources, None
    auth_lines, clean = [], []
    for line in sources:
        kind, url, rest = line.split(" ", 2)
        register_url_credentials(url)
        url, user, password = split_userinfo(url)
        if user or password:
            parts = urllib.parse.urlsplit(url)
            auth_lines.append(f"machine {parts.netloc}{parts.path} login {user} password {password}")
        clean.append(f"{kind} {url} {rest}")
    auth = tmp / "auth.conf"
    auth.write_text("\n".join(auth_lines) + "\n")
    auth.chmod(0o600)
    return clean, auth


def key_file(name: str) -> Path:
    """A packaged archive key file (compat/data/keys/NAME): compat/keys.py's."""
    return keys.key_file(name)


def fingerprints(path: Path, gpg_home: Path) -> list[str]:
    """Primary-key fingerprints in a key file or keyring, as gpg reads them (compat/keys.py)."""
    try:
        return keys.fingerprints(path, gpg_home)
    except keys.ArchiveKeyError as exc:
        raise BootstrapError(str(exc)) from None


def pinned_keyring(spec: BootstrapSpec, tmp: Path) -> Path:
    """A binary keyring holding exactly the archive keys pinned for `spec` (nothing else reaches apt), made by
    compat/keys.py (the audit verifies the security suites with the same keys)."""
    home = tmp / "gnupg"
    # apt verifies as its sandbox user (_apt): the keyring (public keys only) must be readable outside our 0700 tmp
    pub = tmp / "keyring"
    try:
        home.mkdir(mode=0o700, exist_ok=True)
        pub.mkdir(mode=0o755, exist_ok=True)
        pub.chmod(0o755)
        tmp.chmod(0o711)
        out = keys.export_pinned(spec.os_id, spec.keyring, spec.archive_keys, home, pub / f"{spec.os_id}-archive.gpg")
    except keys.ArchiveKeyError as exc:
        raise BootstrapError(str(exc)) from None
    out.chmod(0o644)
    return out


def mirror_epoch(spec: BootstrapSpec, timeout: float = 20.0) -> str | None:
    """SOURCE_DATE_EPOCH for a mirror without snapshot: the newest `Date:` of the suites' InRelease files, so two
    bootstraps of the same mirror state give the same bytes. None when a Release file cannot be read."""
    import email.utils
    import urllib.request

    newest = None
    for line in spec.sources():
        _, url, suite = line.split(" ", 3)[:3]
        clean, user, password = split_userinfo(url)
        req = urllib.request.Request(f"{clean.rstrip('/')}/dists/{suite}/InRelease")
        if user or password:
            import base64

            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (the user's mirror)
                head = resp.read(8192).decode("utf-8", "replace")
        except Exception:
            return None
        for text in head.splitlines():
            if text.startswith("Date:"):
                stamp = int(email.utils.parsedate_to_datetime(text[5:].strip()).timestamp())
                newest = stamp if newest is None else max(newest, stamp)
                break
        else:
            return None
    return None if newest is None else str(newest)


def _command(tool: str, spec: BootstrapSpec, out_tar: Path, tmp: Path) -> tuple[list[str], dict[str, Any]]:
    env = dict(os.environ)
    sources, auth = _strip_credentials(spec, tmp)
    keyring = [f"--keyring={pinned_keyring(spec, tmp)}"]
    if spec.snapshot:
        env["SOURCE_DATE_EPOCH"] = _epoch(spec.snapshot)
    elif "SOURCE_DATE_EPOCH" not in env:
        epoch = mirror_epoch(spec)
        if epoch:
            env["SOURCE_DATE_EPOCH"] = epoch
    if tool == "mmdebstrap":
        cmd = [
            "mmdebstrap",
            f"--variant={spec.variant}",
            f"--components={','.join(spec.components)}",
            f"--include={','.join(spec.packages)}",
            f"--architectures={spec.architecture}",
            "--format=tar",
            *keyring,
            *[f"--dpkgopt={f}" for f in DPKG_FILTERS],
        ]
        if spec.snapshot:
            cmd.append('--aptopt=Acquire::Check-Valid-Until "false"')
        if auth:
            cmd += [f'--aptopt=Dir::Etc::netrc "{auth}"',
                    '--customize-hook=sed -i "/Dir::Etc::netrc/d" "$1/etc/apt/apt.conf.d/99mmdebstrap"']
        cmd += [spec.codename, str(out_tar), *sources]
        return cmd, env
    # debootstrap: one mirror only, into a folder; the caller tars it up
    if auth:
        raise BootstrapError("debootstrap cannot use a mirror with credentials; install mmdebstrap")
    mirror = sources[0].split(" ")[1]
    cmd = [
        "debootstrap", f"--arch={spec.architecture}", f"--variant={spec.variant}", f"--components={','.join(spec.components)}",
        f"--include={','.join(spec.packages)}", *keyring, spec.codename, str(tmp / "rootfs"), mirror,
    ]
    return cmd, env


def _epoch(snapshot: str) -> str:
    from datetime import datetime, timezone

    for fmt in ("%Y%m%dT%H%M%SZ", "%Y%m%d", "%Y-%m-%d"):
        try:
            return str(int(datetime.strptime(snapshot, fmt).replace(tzinfo=timezone.utc).timestamp()))
        except ValueError:
            continue
    raise BootstrapError(f"snapshot {snapshot!r} is not a date like 20251101T000000Z")


def _run(cmd: list[str], env: dict[str, Any], log: IO[str], on_line: Callable[[str], None] | None) -> int:
    log.write("$ " + redact(" ".join(cmd)) + "\n")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=False)
    with _running_lock:
        _running.add(proc)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = redact(line.rstrip("\n"))
            log.write(line + "\n")
            if on_line:
                on_line(line)
        return proc.wait()
    finally:
        with _running_lock:
            _running.discard(proc)


def image_labels(spec: BootstrapSpec, h: str) -> dict[str, str]:
    labels = {
        HASH_LABEL: h,
        "io.imagebuild.os": spec.os_id,
        "io.imagebuild.bootstrap-suite": spec.codename,
        "io.imagebuild.bootstrap-mirror": redact(spec.mirror),
        "io.imagebuild.bootstrap-packages": ",".join(spec.packages),
    }
    if spec.snapshot:
        labels["io.imagebuild.bootstrap-snapshot"] = spec.snapshot
    return labels


def bootstrap_config(spec: BootstrapSpec, h: str, diff_id: str, epoch: int, tool: str, architecture: str) -> bytes:
    """The bootstrap image's config: dated SOURCE_DATE_EPOCH, not the import time, so its ID is reproducible."""
    # ociarchive (and tarfile) only to make an image: finding the one a run reuses loads neither
    from imagebuild.builder import ociarchive

    return ociarchive.image_config(
        diff_id=diff_id, epoch=epoch, architecture=architecture, labels=image_labels(spec, h),
        env=[f"PATH={DEFAULT_PATH}", "LANG=C.UTF-8"], cmd=["bash"],
        created_by=f"imagebuild bootstrap: {tool} --variant={spec.variant} {spec.codename} ({spec.os_id})",
        comment=f"bootstrap format {BOOTSTRAP_FORMAT}",
    )


def _import(store: ImageStore, tar_path: Path, spec: BootstrapSpec, h: str, epoch: int, tool: str) -> str:
    """Load the rootfs tar as a one-layer image whose config we write (ociarchive): the same tar and inputs give the
    same image ID on any engine."""
    from imagebuild.builder import ociarchive

    config = bootstrap_config(spec, h, ociarchive.file_digest(tar_path), epoch, tool, spec.architecture)
    archive = tar_path.with_name("image.tar")
    ociarchive.write_docker_archive(archive, tar_path, config, spec.tag)
    tar_path.unlink()  # the archive holds a copy: keep the peak disk use at one copy plus the archive
    try:
        ociarchive.load_archive(store, archive, f"the {spec.os_id} root filesystem")
    except ociarchive.LoadError as exc:
        raise BootstrapError(str(exc)) from None
    finally:
        archive.unlink(missing_ok=True)
    image_id = store.image_id(spec.tag)
    if image_id is None:
        raise BootstrapError(f"loading the {spec.os_id} root filesystem finished but the engine has no {spec.tag}")
    expected = ociarchive.config_id(config)
    if image_id != expected:  # an image store that IDs images otherwise (containerd): say so, the tag is right
        _log.debug("bootstrap image %s has ID %s, config digest %s", spec.tag, image_id, expected)
    return image_id


def ensure_bootstrap(engine: ImageStore | EngineClient, spec: BootstrapSpec, *, force: bool = False, log_dir: Path | None = None,
                     workdir: Path | None = None, on_line: Callable[[str], None] | None = None) -> BootstrapResult:
    """Reuse or build the bootstrap image for `spec`; returns its image ID."""
    store = as_store(engine)
    h = spec.hash()
    if not force:
        existing = find_existing(store, spec)
        if existing:
            return BootstrapResult(existing, spec.tag, reused=True)
    if os.geteuid() != 0:
        raise BootstrapError(
            f"bootstrapping {spec.os_id} needs root (mmdebstrap/debootstrap write device nodes and owners); "
            "run as root or use a registry base (base: {ref: ...})"
        )
    tool = choose_tool()
    start = time.monotonic()
    log_dir = Path(log_dir or tempfile.gettempdir())
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"bootstrap-{spec.os_id}-{h[:12]}.log"
    with tempfile.TemporaryDirectory(prefix="imagebuild-bootstrap-", dir=workdir) as tmpname, \
            open(log_path, "w", encoding="utf-8") as log:
        tmp = Path(tmpname)
        out_tar = tmp / "rootfs.tar"
        cmd, env = _command(tool, spec, out_tar, tmp)
        # no SOURCE_DATE_EPOCH (a mirror without a readable InRelease date): the rootfs is not reproducible anyway
        sde = env.get("SOURCE_DATE_EPOCH", "")
        epoch = int(sde) if sde.isdigit() else int(time.time())
        rc = _run(cmd, env, log, on_line)
        if rc == 0 and tool == "debootstrap":
            rc = _run(["tar", "--numeric-owner", "--xattrs", "-C", str(tmp / "rootfs"), "-cf", str(out_tar),
                       "."], env, log, None)
        if rc != 0:
            log.flush()
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
            raise BootstrapError(
                f"{tool} of {spec.codename} from {redact(spec.mirror)} failed (exit {rc}); "
                f"full log: {log_path}\n{tail}"
            )
        image_id = _import(store, out_tar, spec, h, epoch, tool)
    return BootstrapResult(image_id, spec.tag, reused=False, seconds=time.monotonic() - start, tool=tool,
                           log_path=str(log_path))
