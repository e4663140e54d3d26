"""Where secrets live: wallet keys, the Hugging Face token and private swarms' admission secrets.

The OS keyring (macOS Keychain, Windows Credential Locker, Secret Service on Linux desktops) when one exists;
otherwise an encrypted file per secret, sealed with a key derived from the user's passphrase by scrypt and
AES-256-GCM. Never plaintext on disk: keyrings.alt (which stores plaintext or prompts on stdin) is deliberately
not used, and a "fail" or "null" keyring backend counts as no keyring.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import tomllib
from pathlib import Path
from typing import Literal

import tomli_w
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from node.errors import NodeError

logger = logging.getLogger(__name__)

SERVICE = "rl-swarm-desktop"
FILE_VERSION = 1
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**15, 8, 1  # ~30 ms and 32 MiB: interactive-login cost (RFC 7914)
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")

Backend = Literal["auto", "keyring", "file"]
# How a supervising app hands the file store's passphrase to a node it starts: environment variables never reach the
# disk. One variable for every secret, since they all live in one store with one passphrase.
PASSPHRASE_ENV = "RL_SWARM_SECRET_PASSPHRASE"


def keyring_available() -> bool:
    """Whether a real OS keyring backend is usable (not keyring's fail/null backends, not keyrings.alt)."""
    try:
        import keyring
        from keyring.backends import fail
    except ImportError:
        return False
    backend = keyring.get_keyring()
    if isinstance(backend, fail.Keyring) or type(backend).__module__.startswith(("keyrings.alt", "keyring.backends.null")):
        return False
    chained = getattr(backend, "backends", None)
    if chained is not None and not chained:
        return False
    return True


class SecretStore:
    """Named secrets for one data folder, in the keyring or in passphrase-encrypted files.

    ``passphrase`` is only needed by the file backend; without one, reading or writing raises a NodeError with
    code ``locked`` so the caller (GUI dialog, CLI prompt) can ask for it and retry.
    """

    def __init__(self, data_dir: Path, *, backend: Backend = "auto", passphrase: str | None = None) -> None:
        if backend == "auto":
            backend = "keyring" if keyring_available() else "file"
        if backend == "keyring" and not keyring_available():
            raise NodeError(
                "No OS keyring is available on this system.",
                hint="install and unlock a Secret Service keyring (e.g. gnome-keyring), or use the encrypted file",
                code="no_keyring",
            )
        self.backend: Literal["keyring", "file"] = backend
        self.passphrase = passphrase
        self.folder = Path(data_dir) / "secrets"
        self._account_prefix = str(Path(data_dir).resolve())  # two data folders never share a secret

    # -- public API ---------------------------------------------------------------------------------------

    def set(self, name: str, value: str) -> None:
        _check_name(name)
        if self.backend == "keyring":
            import keyring

            keyring.set_password(SERVICE, self._account(name), value)
        else:
            self._write_file(name, value)
        logger.info("stored secret %r in the %s", name, self.describe())

    def get(self, name: str) -> str | None:
        _check_name(name)
        if self.backend == "keyring":
            import keyring

            return keyring.get_password(SERVICE, self._account(name))
        return self._read_file(name)

    def has(self, name: str) -> bool:
        _check_name(name)
        if self.backend == "file":
            return self._path(name).exists()
        return self.get(name) is not None

    def delete(self, name: str) -> None:
        _check_name(name)
        if self.backend == "keyring":
            import keyring
            from keyring.errors import PasswordDeleteError

            try:
                keyring.delete_password(SERVICE, self._account(name))
            except PasswordDeleteError:
                pass
        else:
            self._path(name).unlink(missing_ok=True)

    def describe(self) -> str:
        return "OS keyring" if self.backend == "keyring" else f"encrypted file store ({self.folder})"

    # -- encrypted files ----------------------------------------------------------------------------------

    def _account(self, name: str) -> str:
        return f"{self._account_prefix}:{name}"

    def _path(self, name: str) -> Path:
        return self.folder / f"{name}.enc.json"

    def _require_passphrase(self) -> str:
        if not self.passphrase:
            raise NodeError(
                "The secret store is locked.",
                hint="enter the passphrase of the encrypted secret store",
                code="locked",
            )
        return self.passphrase

    def _write_file(self, name: str, value: str) -> None:
        passphrase = self._require_passphrase()
        salt, nonce = os.urandom(16), os.urandom(12)
        key = _derive(passphrase, salt, _SCRYPT_N, _SCRYPT_R, _SCRYPT_P)
        ciphertext = AESGCM(key).encrypt(nonce, value.encode(), name.encode())
        record = {
            "version": FILE_VERSION,
            "kdf": {"name": "scrypt", "n": _SCRYPT_N, "r": _SCRYPT_R, "p": _SCRYPT_P, "salt": _b64(salt)},
            "cipher": {"name": "aes-256-gcm", "nonce": _b64(nonce)},
            "ciphertext": _b64(ciphertext),
        }
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self._path(name)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _read_file(self, name: str) -> str | None:
        path = self._path(name)
        if not path.exists():
            return None
        passphrase = self._require_passphrase()
        try:
            record = json.loads(path.read_text())
            if record.get("version") != FILE_VERSION:
                raise ValueError(f"unknown version {record.get('version')!r}")
            kdf, cipher = record["kdf"], record["cipher"]
            key = _derive(passphrase, _unb64(kdf["salt"]), int(kdf["n"]), int(kdf["r"]), int(kdf["p"]))
            plaintext = AESGCM(key).decrypt(_unb64(cipher["nonce"]), _unb64(record["ciphertext"]), name.encode())
        except InvalidTag:
            raise NodeError(
                "Wrong passphrase for the encrypted secret store.",
                hint="try again; the passphrase is the one chosen when the secret was first saved",
                code="wrong_passphrase",
            ) from None
        except (ValueError, KeyError, TypeError) as e:
            raise NodeError(
                f"The encrypted secret {path} is damaged ({e}).",
                hint="delete it and enter the secret again, or restore it from a backup",
                code="secret_damaged",
            ) from None
        return plaintext.decode()


def node_store(data_dir: Path, passphrase: str | None = None) -> SecretStore:
    """The data folder's store: the OS keyring, else the encrypted file store, unlocked with ``passphrase`` or
    :data:`PASSPHRASE_ENV`."""
    return SecretStore(data_dir, passphrase=passphrase or os.environ.get(PASSPHRASE_ENV) or None)


def explain_locked(exc: NodeError, what: str) -> NodeError:
    """A locked store's error in words that say which secret a node lacks (``what``) and how to unlock it."""
    if exc.code != "locked":
        return exc
    return NodeError(
        f"The encrypted secret store is locked, so {what}.",
        hint=f"set {PASSPHRASE_ENV} to the store's passphrase for this node, or use a computer with an OS keyring",
        code="locked",
    )


def drop_plaintext(path: Path, section: str, key: str) -> None:
    """Rewrite a config file without ``[section] key``, a secret an earlier version kept there in plaintext (once it
    is in the store): only that line when possible, so comments stay."""
    text = path.read_text(encoding="utf-8")
    data = tomllib.loads(text)
    del data[section][key]
    edited = re.sub(rf"(?m)^[ \t]*{re.escape(key)}[ \t]*=.*(\n|$)", "", text)
    try:
        line_removed = tomllib.loads(edited) == data
    except tomllib.TOMLDecodeError:
        line_removed = False
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(edited if line_removed else tomli_w.dumps(data))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ValueError(f"secret names are lower-case words, got {name!r}")


def _derive(passphrase: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(passphrase.encode())


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)
