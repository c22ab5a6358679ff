"""Which key signs (`push --sign-key`) and which key verifies (`--verify-key`), and the checks made before anything is
pushed or started: a missing key file, a file that is not a cosign key, or a wrong password is bad input (exit 2),
said in one line before a single layer moves.

A key is a cosign key file (`cosign generate-key-pair`: an encrypted private key, its password from COSIGN_PASSWORD
or stdin; refused when its group or anyone else may read or write it, as ssh refuses such private keys: the password
is all that stands between another account and the key, and a CI secret mounted 0644 usually has a weak one) or a KMS URI passed through to cosign as it is (awskms://, gcpkms://, azurekms://, hashivault://, k8s://,
gitlab://, pkcs11:): cosign talks to the KMS, the private key never exists here. The password lives in memory, is
registered with imagebuild.secrets (so no message can carry it) and is handed to cosign in its environment only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from imagebuild.errors import UsageError
from imagebuild.secrets import redact, register_secret
from imagebuild.sign.cosign import run_cosign

ENV_SIGN_KEY = "IMAGEBUILD_SIGN_KEY"
ENV_VERIFY_KEY = "IMAGEBUILD_VERIFY_KEY"
ENV_PASSWORD = "COSIGN_PASSWORD"  # cosign's own variable: the same name in CI secrets for both tools
_KMS = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|pkcs11:)")
_MAX_KEY_FILE = 1 << 20


def is_kms(ref: str) -> bool:
    return bool(_KMS.match(ref))


def _private_key_mode(path: Path, flag: str, value: str) -> None:
    """UsageError when anyone but the owner may read or write the private key file (mode & 0o077, as ssh)."""
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        who, bits = ("every user", mode & 0o007) if mode & 0o007 else ("its group", (mode >> 3) & 0o007)
        may = " and ".join(v for b, v in ((4, "read"), (2, "change")) if bits & b) or "reach"
        raise UsageError(f"{flag} {value}: permissions {mode:04o}: {who} may {may} this private key; refused "
                         f"(as ssh refuses such keys): chmod 600 {path}")


def _key_text(path: Path, flag: str) -> str:
    try:
        if path.stat().st_size > _MAX_KEY_FILE:
            raise UsageError(f"{flag} {path}: over {_MAX_KEY_FILE} bytes: not a cosign key")
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise UsageError(f"{flag} {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{flag} {path}: a folder, not a key file") from None
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot read it ({exc.strerror})") from None


@dataclass(frozen=True)
class SigningKey:
    """The private key push signs with: an absolute file path or a KMS URI, and the file's password."""

    ref: str
    password: str | None = field(default=None, repr=False)

    @classmethod
    def from_option(cls, value: str, password: str | None) -> SigningKey:
        """--sign-key VALUE (or IMAGEBUILD_SIGN_KEY); the password from --sign-password-stdin, else COSIGN_PASSWORD."""
        if password is None:
            password = os.environ.get(ENV_PASSWORD)
        register_secret(password)
        if is_kms(value):
            return cls(value, password)
        path = Path(value).expanduser().resolve()
        text = _key_text(path, "--sign-key")
        if "PUBLIC KEY-----" in text and "PRIVATE KEY-----" not in text:
            raise UsageError(f"--sign-key {value}: a public key; signing needs the private key (cosign.key)")
        if "PRIVATE KEY-----" not in text:
            raise UsageError(f"--sign-key {value}: not a cosign private key (no PRIVATE KEY block)")
        _private_key_mode(path, "--sign-key", value)
        return cls(str(path), password)

    def describe(self) -> str:
        return redact(self.ref)

    def public_key(self) -> str:
        """The public half (`cosign public-key`): proves the file opens with this password (or the KMS answers)
        before anything is pushed. UsageError naming the key for a wrong password or an unusable key."""
        done = run_cosign(["public-key", "--key", self.ref], password=self.password)
        if done.returncode == 0 and "PUBLIC KEY-----" in done.stdout:
            return done.stdout
        why = done.error
        if "decrypt" in why or "password" in why.lower():
            raise UsageError(f"--sign-key {self.describe()}: wrong password (from --sign-password-stdin or "
                             f"{ENV_PASSWORD}): {why}")
        raise UsageError(f"--sign-key {self.describe()}: cosign cannot use it: {why}")


@dataclass(frozen=True)
class PublicKey:
    """The key `verify`, `run`, `export` and `slurm` check signatures against: a PEM file or a KMS URI."""

    ref: str
    source: str = "--verify-key"  # the flag or variable it came from (messages name it)
    label: str = ""  # what messages call it instead of `ref` (a signing key's public half in a temporary file)

    @classmethod
    def from_option(cls, value: str, source: str = "--verify-key") -> PublicKey:
        if is_kms(value):
            return cls(value, source)
        path = Path(value).expanduser().resolve()
        text = _key_text(path, source)
        if "PRIVATE KEY-----" in text:
            raise UsageError(f"{source} {value}: a private key; verifying needs the public key (cosign.pub)")
        if "PUBLIC KEY-----" not in text:
            raise UsageError(f"{source} {value}: not a public key (no PUBLIC KEY block)")
        return cls(str(path), source)

    def describe(self) -> str:
        return redact(self.label or self.ref)


def configured_public_key(flag_value: str | None, flag: str = "--verify-key") -> PublicKey | None:
    """The verify key of `run`/`export`/`slurm` (`flag`: the option the command has; `verify`'s is --key): the
    option, else IMAGEBUILD_VERIFY_KEY, else none (no check)."""
    if flag_value:
        return PublicKey.from_option(flag_value, flag)
    env = os.environ.get(ENV_VERIFY_KEY)
    return PublicKey.from_option(env, ENV_VERIFY_KEY) if env else None
