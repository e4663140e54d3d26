"""The node's Ethereum wallet: create (mnemonic shown once, then confirmed), import, export, unlock.

The private key lives in the :class:`~node.secret_store.SecretStore` (OS keyring, or an scrypt + AES-GCM encrypted
file unlocked by a passphrase); the mnemonic is never stored. Next to it, ``<data_dir>/wallet/<name>.json`` keeps
only public facts (address, where the key is, how it was made) so the address is known without unlocking.
Backups are standard Ethereum keystore JSON files (scrypt), which any wallet software imports.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from eth_account import Account
from eth_account.signers.local import LocalAccount

from node.errors import NodeError
from node.secret_store import Backend, SecretStore

Account.enable_unaudited_hdwallet_features()  # BIP-39 mnemonics (eth-account's HD wallet support)

MIN_PASSPHRASE = 8
QUIZ_WORDS = 3  # words asked back to confirm the mnemonic was written down
DERIVATION_PATH = "m/44'/60'/0'/0/{index}"  # MetaMask's and most wallets' default account path
# How a supervising app hands the passphrase to a node process: the same variable as node.hub.auth, since the
# wallet key and the Hub token live in one secret store with one passphrase.
PASSPHRASE_ENV = "RL_SWARM_SECRET_PASSPHRASE"

Source = Literal["created", "mnemonic", "private_key", "keystore"]


@dataclass(frozen=True)
class WalletInfo:
    name: str
    address: str
    backend: Literal["keyring", "file"]
    source: Source
    created: float


@dataclass(frozen=True)
class PendingWallet:
    """A freshly generated wallet, not saved until the user proves they wrote the words down."""

    words: tuple[str, ...] = field(repr=False)  # never in a log line
    address: str
    quiz: tuple[int, ...]  # 1-based word positions the user must type back
    _key: str = field(repr=False)

    def check(self, answers: Mapping[int, str]) -> bool:
        return all(answers.get(i, "").strip().lower() == self.words[i - 1] for i in self.quiz)


def new_wallet(*, words: int = 12) -> PendingWallet:
    """Generate a wallet; show ``words`` once, then pass the user's answers to :meth:`WalletStore.save_new`."""
    account, phrase = Account.create_with_mnemonic(num_words=words)
    word_list = tuple(phrase.split())
    quiz = tuple(sorted(random.SystemRandom().sample(range(1, len(word_list) + 1), QUIZ_WORDS)))
    return PendingWallet(words=word_list, address=account.address, quiz=quiz, _key=account.key.hex())


class WalletStore:
    """One named wallet in one data folder."""

    def __init__(
        self, data_dir: Path, name: str = "default", *, backend: Backend = "auto", passphrase: str | None = None
    ) -> None:
        self.data_dir = Path(data_dir)
        self.name = name
        self.secrets = SecretStore(self.data_dir, backend=backend, passphrase=passphrase)
        self._meta_path = self.data_dir / "wallet" / f"{name}.json"

    @property
    def secret_name(self) -> str:
        return f"wallet-{self.name}"

    def exists(self) -> bool:
        return self._meta_path.exists()

    def info(self) -> WalletInfo | None:
        if not self._meta_path.exists():
            return None
        data = json.loads(self._meta_path.read_text(encoding="utf-8"))
        return WalletInfo(
            name=self.name, address=data["address"], backend=data["backend"], source=data["source"],
            created=float(data["created"]),
        )

    # -------------------------------------------------------------------------------------------------- create
    def save_new(self, pending: PendingWallet, answers: Mapping[int, str], *, replace: bool = False) -> WalletInfo:
        if not pending.check(answers):
            raise NodeError(
                "the words you typed do not match the recovery phrase",
                hint=f"type words {', '.join(map(str, pending.quiz))} of the phrase exactly as shown",
                code="mnemonic_mismatch",
            )
        return self._save(pending._key, "created", replace=replace)

    def import_mnemonic(self, phrase: str, *, account_index: int = 0, replace: bool = False) -> WalletInfo:
        try:
            account = Account.from_mnemonic(" ".join(phrase.split()).lower(), account_path=DERIVATION_PATH.format(index=account_index))
        except Exception:  # noqa: BLE001 - eth-account raises several types for a bad phrase; none carries the words
            raise NodeError(
                "this is not a valid recovery phrase", hint="check the words (12 or 24, in order) and their spelling",
                code="bad_mnemonic",
            ) from None
        return self._save(account.key.hex(), "mnemonic", replace=replace)

    def import_private_key(self, private_key: str, *, replace: bool = False) -> WalletInfo:
        try:
            account = Account.from_key(private_key.strip())
        except Exception:  # noqa: BLE001 - the message could echo the key
            raise NodeError(
                "this is not a valid private key", hint="paste the 64 hexadecimal characters (0x prefix optional)",
                code="bad_private_key",
            ) from None
        return self._save(account.key.hex(), "private_key", replace=replace)

    def import_keystore(self, keystore: str | Path, password: str, *, replace: bool = False) -> WalletInfo:
        """Import an Ethereum keystore JSON (the text or a file path) encrypted with ``password``."""
        text = Path(keystore).read_text(encoding="utf-8") if isinstance(keystore, Path) else keystore
        try:
            data = json.loads(text)
        except ValueError:
            raise NodeError("this is not a keystore file (not JSON)", hint="choose the wallet's keystore JSON file",
                            code="bad_keystore") from None
        try:
            key = Account.decrypt(data, password)
        except ValueError as exc:
            wrong = "mac mismatch" in str(exc).lower()
            raise NodeError(
                "wrong password for this keystore" if wrong else f"this keystore cannot be read ({exc})",
                hint="type the password the keystore was exported with" if wrong else "choose a valid keystore file",
                code="wrong_password" if wrong else "bad_keystore",
            ) from None
        except (KeyError, TypeError, NotImplementedError) as exc:
            raise NodeError(f"this keystore cannot be read ({exc})", hint="choose a valid keystore file",
                            code="bad_keystore") from None
        return self._save(key.hex(), "keystore", replace=replace)

    # ------------------------------------------------------------------------------------------------------ use
    def unlock(self) -> LocalAccount:
        """The wallet's account; raises NodeError codes ``no_wallet``, ``locked``, ``wrong_passphrase``."""
        info = self.info()
        if info is None:
            raise NodeError(
                f"there is no wallet {self.name!r} in {self.data_dir}",
                hint="create or import one (`rl-swarm-node wallet create` or `wallet import`)", code="no_wallet",
            )
        store = self.secrets
        if info.backend != store.backend:
            store = SecretStore(self.data_dir, backend=info.backend, passphrase=self.secrets.passphrase)
        key = store.get(self.secret_name)
        if key is None:
            raise NodeError(
                f"the key of wallet {self.name!r} is missing from the {store.describe()}",
                hint="import the wallet again from its recovery phrase or keystore backup", code="key_missing",
            )
        account = Account.from_key(key)
        if account.address != info.address:
            raise NodeError(f"the stored key does not match wallet {info.address}", code="key_mismatch",
                            hint="import the wallet again from its backup")
        return account

    def export_keystore(self, dest: Path, password: str) -> Path:
        """Write a standard Ethereum keystore (scrypt) of the wallet, owner-readable only."""
        _check_passphrase(password, "keystore password")
        account = self.unlock()
        keystore = Account.encrypt(account.key, password, kdf="scrypt")
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        _write_private(dest, json.dumps(keystore))
        return dest

    def delete(self) -> None:
        info = self.info()
        if info is not None:
            SecretStore(self.data_dir, backend=info.backend, passphrase=self.secrets.passphrase).delete(self.secret_name)
        self._meta_path.unlink(missing_ok=True)

    # ------------------------------------------------------------------------------------------------ internals
    def _save(self, key_hex: str, source: Source, *, replace: bool) -> WalletInfo:
        if self.exists() and not replace:
            raise NodeError(
                f"a wallet {self.name!r} already exists ({self.info().address})",  # type: ignore[union-attr]
                hint="export a backup of it first, then replace it explicitly", code="wallet_exists",
            )
        if self.secrets.backend == "file":
            _check_passphrase(self.secrets.passphrase or "", "passphrase")
        address = Account.from_key(key_hex).address
        self.secrets.set(self.secret_name, key_hex)
        info = WalletInfo(name=self.name, address=address, backend=self.secrets.backend, source=source, created=time.time())
        self._meta_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _write_private(self._meta_path, json.dumps(
            {"address": address, "backend": info.backend, "source": source, "created": info.created}
        ))
        return info


def _check_passphrase(passphrase: str, what: str) -> None:
    if len(passphrase) < MIN_PASSPHRASE:
        raise NodeError(f"the {what} is too short", hint=f"use at least {MIN_PASSPHRASE} characters",
                        code="weak_passphrase")


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
