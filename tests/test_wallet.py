"""The wallet: create with confirmation, imports, keystore backup, unlock, wrong passphrases, no plaintext key."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from eth_account import Account

from node.chain.wallet import PASSPHRASE_ENV, WalletStore, new_wallet
from node.errors import NodeError

PASS = "correct horse battery"
KNOWN_PHRASE = "test test test test test test test test test test test junk"  # hardhat's public dev phrase
KNOWN_ADDRESS = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"  # its account 0 (m/44'/60'/0'/0/0)


@pytest.fixture
def captured_logs(tmp_path):
    """Every log record at DEBUG into a file inside the data folder (so the plaintext scan sees it)."""
    handler = logging.FileHandler(tmp_path / "debug.log")
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield tmp_path / "debug.log"
    root.removeHandler(handler)
    root.setLevel(old_level)
    handler.close()


def assert_no_plaintext(folder: Path, *secrets: str) -> None:
    needles = set()
    for secret in secrets:
        bare = secret.removeprefix("0x")
        needles |= {bare.lower().encode(), bare.upper().encode(), bytes.fromhex(bare) if len(bare) == 64 else b"x" * 99}
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for needle in needles:
                assert needle not in data, f"plaintext secret in {path}"


def test_create_requires_confirmation_then_unlocks(tmp_path, captured_logs):
    pending = new_wallet()
    assert len(pending.words) == 12 and len(pending.quiz) == 3
    assert " ".join(pending.words) not in repr(pending)  # the phrase never reaches a log line by accident
    store = WalletStore(tmp_path, backend="file", passphrase=PASS)
    wrong = {i: "wrong" for i in pending.quiz}
    with pytest.raises(NodeError) as mismatch:
        store.save_new(pending, wrong)
    assert mismatch.value.code == "mnemonic_mismatch"
    assert not store.exists()
    info = store.save_new(pending, {i: f" {pending.words[i - 1].upper()} " for i in pending.quiz})
    assert info.address == pending.address and info.backend == "file" and info.source == "created"
    account = WalletStore(tmp_path, backend="file", passphrase=PASS).unlock()
    assert account.address == pending.address
    # the phrase restores the same wallet elsewhere (standard BIP-39 / BIP-44 derivation)
    other = WalletStore(tmp_path / "other", backend="file", passphrase=PASS).import_mnemonic(" ".join(pending.words))
    assert other.address == pending.address
    assert_no_plaintext(tmp_path, account.key.hex())
    phrase = " ".join(pending.words).encode()
    assert all(phrase not in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


def test_imports_export_and_wrong_secrets(tmp_path, captured_logs):
    store = WalletStore(tmp_path, backend="file", passphrase=PASS)
    assert store.import_mnemonic("  " + KNOWN_PHRASE.upper() + "\n").address == KNOWN_ADDRESS
    with pytest.raises(NodeError) as exists:
        store.import_private_key("0x" + "11" * 32)
    assert exists.value.code == "wallet_exists"
    key = Account.create().key.hex()
    info = store.import_private_key(key, replace=True)
    assert info.source == "private_key" and info.address == Account.from_key(key).address

    backup = tmp_path / "backup" / "wallet.json"
    store.export_keystore(backup, "backup password")
    keystore = json.loads(backup.read_text())
    assert keystore["version"] == 3 and keystore["crypto"]["kdf"] == "scrypt"
    assert oct(backup.stat().st_mode & 0o777) == "0o600"
    assert Account.from_key(Account.decrypt(keystore, "backup password")).address == info.address

    restored = WalletStore(tmp_path / "restored", backend="file", passphrase="another passphrase")
    with pytest.raises(NodeError) as wrong_password:
        restored.import_keystore(backup, "not the password")
    assert wrong_password.value.code == "wrong_password"
    assert restored.import_keystore(backup, "backup password").address == info.address

    with pytest.raises(NodeError) as wrong_passphrase:
        WalletStore(tmp_path, backend="file", passphrase="not it at all").unlock()
    assert wrong_passphrase.value.code == "wrong_passphrase"
    with pytest.raises(NodeError) as locked:
        WalletStore(tmp_path, backend="file").unlock()
    assert locked.value.code == "locked"
    for bad, code in (("0x1234", "bad_private_key"), ("not a key at all", "bad_private_key")):
        with pytest.raises(NodeError) as refused:
            WalletStore(tmp_path / "x", backend="file", passphrase=PASS).import_private_key(bad)
        assert refused.value.code == code and bad not in str(refused.value)
    with pytest.raises(NodeError) as bad_phrase:
        WalletStore(tmp_path / "y", backend="file", passphrase=PASS).import_mnemonic("apple banana cherry")
    assert bad_phrase.value.code == "bad_mnemonic"
    with pytest.raises(NodeError) as weak:
        WalletStore(tmp_path / "z", backend="file", passphrase="short").import_private_key(key)
    assert weak.value.code == "weak_passphrase"
    with pytest.raises(NodeError) as no_wallet:
        WalletStore(tmp_path / "empty", backend="file", passphrase=PASS).unlock()
    assert no_wallet.value.code == "no_wallet"
    assert_no_plaintext(tmp_path, key)


def test_no_keyring_backend_falls_back_to_encrypted_file(tmp_path):
    # Headless Linux: keyring has no backend. Asking for it explicitly is a clear error; auto uses the file.
    with pytest.raises(NodeError) as no_keyring:
        WalletStore(tmp_path, backend="keyring")
    assert no_keyring.value.code == "no_keyring"
    store = WalletStore(tmp_path, passphrase=PASS)
    assert store.secrets.backend == "file"
    store.import_private_key("0x" + "22" * 32)
    assert WalletStore(tmp_path, passphrase=PASS).unlock().address == store.info().address


def test_cli_import_show_export_never_prints_the_key(tmp_path):
    key = Account.create().key.hex()
    env = {**os.environ, PASSPHRASE_ENV: PASS}
    run = lambda *args, stdin="": subprocess.run(  # noqa: E731
        [sys.executable, "-m", "node", *args, "--data-dir", str(tmp_path)], input=stdin, capture_output=True,
        text=True, env=env, timeout=120,
    )
    imported = run("wallet", "import", "--private-key", stdin=key + "\n")
    assert imported.returncode == 0, imported.stderr
    address = Account.from_key(key).address
    assert address in imported.stdout
    shown = run("wallet", "show")
    assert address in shown.stdout and "encrypted file" in shown.stdout
    exported = run("wallet", "export", str(tmp_path / "backup.json"), stdin="backup password\n")
    assert exported.returncode == 0, exported.stderr
    again = run("wallet", "import", "--keystore", str(tmp_path / "backup.json"), "--wallet", "copy",
                stdin="backup password\n")
    assert again.returncode == 0 and address in again.stdout, again.stderr
    wrong = subprocess.run(
        [sys.executable, "-m", "node", "wallet", "show", "--data-dir", str(tmp_path), "--wallet", "nope"],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert wrong.returncode == 2 and "no wallet" in wrong.stderr
    for output in (imported, shown, exported, again):
        assert key.removeprefix("0x") not in output.stdout + output.stderr
    assert_no_plaintext(tmp_path, key)


_SECRET_SERVICE = textwrap.dedent("""
    import sys
    from pathlib import Path
    from node.secret_store import keyring_available
    from node.chain.wallet import WalletStore
    assert keyring_available(), "no Secret Service"
    data = Path(sys.argv[1])
    info = WalletStore(data, backend="keyring").import_private_key(sys.argv[2])
    assert info.backend == "keyring"
    assert WalletStore(data).unlock().address == info.address  # auto picks the keyring, no passphrase needed
    print(info.address)
""")


@pytest.mark.skipif(not (shutil.which("gnome-keyring-daemon") and shutil.which("dbus-run-session")),
                    reason="gnome-keyring is not installed (apt-get install gnome-keyring)")
def test_real_secret_service_keeps_the_key_off_disk(tmp_path):
    key = Account.create().key.hex()
    script = tmp_path / "probe.py"
    script.write_text(_SECRET_SERVICE)
    # a private session bus with an unlocked login keyring, as on a Linux desktop
    shell = (f"echo -n test-login | gnome-keyring-daemon --unlock --components=secrets >/dev/null && "
             f"{sys.executable} {script} {tmp_path / 'data'} {key}")
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    (tmp_path / "run").mkdir(mode=0o700)
    result = subprocess.run(["dbus-run-session", "--", "sh", "-c", shell], capture_output=True, text=True, env=env,
                            timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == Account.from_key(key).address
    assert not (tmp_path / "data" / "secrets").exists()  # nothing in the encrypted-file store: it is in the keyring
    assert_no_plaintext(tmp_path / "data", key)
