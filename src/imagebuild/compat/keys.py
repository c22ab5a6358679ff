"""THE pinned archive keys: a keyring holding exactly the fingerprints compat/data/os.yaml pins for an OS, exported
from the packaged key file (compat/data/keys/), and a signed file (InRelease) verified against it with gpgv. The
bootstrap hands the keyring to apt (builder/bootstrap.py); the audit verifies the security suites' InRelease with it
(audit/debian.py). gpg runs with --no-autostart: public keys need no gpg-agent, and one started here would outlive us."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from imagebuild.errors import ImagebuildError


class ArchiveKeyError(ImagebuildError):
    """A key file, keyring or signature that cannot be trusted (the message says which and why)."""


def key_file(name: str) -> Path:
    """A packaged archive key file (compat/data/keys/NAME)."""
    from importlib import resources

    return Path(str(resources.files("imagebuild.compat").joinpath("data").joinpath("keys").joinpath(name)))


def fingerprints(path: Path, gpg_home: Path) -> list[str]:
    """Primary-key fingerprints in a key file or keyring, as gpg reads them."""
    out = subprocess.run(["gpg", "--homedir", str(gpg_home), "--batch", "--no-autostart", "--show-keys", "--with-colons", str(path)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise ArchiveKeyError(f"gpg cannot read {path}: {out.stderr.strip()[-300:]}")
    fprs, primary = [], False
    for line in out.stdout.splitlines():
        fields = line.split(":")
        if fields[0] == "pub":
            primary = True
        elif fields[0] == "fpr" and primary:
            fprs.append(fields[9].upper())
            primary = False
        elif fields[0] == "sub":
            primary = False
    return fprs


def export_pinned(os_id: str, keyring: str | None, archive_keys: tuple[str, ...], home: Path, out: Path,
                  what: str = "bootstrapped") -> Path:
    """Write to `out` a binary keyring of exactly `archive_keys` from the packaged file `keyring`; `home`: an empty
    gpg home folder (0700) of the caller's. ArchiveKeyError when the keys are not pinned, gpg is missing, the file lacks a
    pinned key or the export holds anything else."""
    if not archive_keys or not keyring:
        raise ArchiveKeyError(f"{os_id}: no archive key fingerprints in compat/data/os.yaml: its mirror cannot "
                        f"be verified, so it is not {what}")
    if shutil.which("gpg") is None:
        raise ArchiveKeyError("the archive keys are checked with gpg: apt-get install gpg")
    source = key_file(keyring)
    if not source.is_file():
        raise ArchiveKeyError(f"{os_id}: archive key file {source} is missing from the package")
    have = set(fingerprints(source, home))
    missing = [f for f in archive_keys if f not in have]
    if missing:
        raise ArchiveKeyError(f"{os_id}: {source.name} lacks the pinned archive key(s) {', '.join(missing)}")
    subprocess.run(["gpg", "--homedir", str(home), "--batch", "--no-autostart", "--quiet", "--import", str(source)],
                   check=True, capture_output=True)
    with open(out, "wb") as fh:
        subprocess.run(["gpg", "--homedir", str(home), "--batch", "--no-autostart", "--export", *archive_keys], check=True,
                       stdout=fh, stderr=subprocess.PIPE)
    got = fingerprints(out, home)
    if sorted(got) != sorted(archive_keys):  # belt and braces: exactly the pinned keys, nothing more
        raise ArchiveKeyError(f"{os_id}: exported keyring holds {got}, expected {list(archive_keys)}")
    return out


def verify_clearsigned(signed: bytes, keyring: Path, pinned: tuple[str, ...], what: str) -> bytes:
    """The text a clearsigned file (InRelease) vouches for, as apt trusts it: gpgv against `keyring` only, at least
    one VALIDSIG whose primary key is `pinned` and no BADSIG (an archive signs with its new and its old key, one of
    them may be unknown: that alone does not fail it). ArchiveKeyError naming `what` otherwise."""
    import tempfile

    if shutil.which("gpgv") is None:
        raise ArchiveKeyError(f"{what}: verifying it needs gpgv: apt-get install gpgv")
    with tempfile.TemporaryDirectory(prefix="imagebuild-gpgv-") as tmp:
        text = Path(tmp) / "signed.txt"
        out = subprocess.run(["gpgv", "--status-fd", "1", "--keyring", str(keyring), "--output", str(text), "-"],
                             input=signed, capture_output=True, timeout=60)
        status = out.stdout.decode("utf-8", "replace").splitlines()
        good = [ln.split() for ln in status if ln.startswith("[GNUPG:] VALIDSIG ")]
        signers = {f[-1].upper() for f in good if len(f) >= 3}
        bad = [ln for ln in status if ln.startswith("[GNUPG:] BADSIG ")]
        if bad or not signers & set(pinned) or not text.is_file():
            reason = out.stderr.decode("utf-8", "replace").strip().splitlines()
            why = "a bad signature" if bad else (reason or ["gpgv failed"])[-1][:200]
            raise ArchiveKeyError(f"{what}: not signed by a pinned archive key ({why})")
        return text.read_bytes()
