import json
import os
import stat

import pytest

from node.errors import NodeError
from node.secret_store import SecretStore, keyring_available


def test_headless_linux_has_no_keyring():
    # CI machines have no Secret Service; the store must fall back to files instead of keyrings.alt.
    assert not keyring_available()
    assert SecretStore(data_dir=os.getcwd()).backend == "file"


def test_file_store_round_trip_is_encrypted_and_private(tmp_path):
    store = SecretStore(tmp_path, backend="file", passphrase="correct horse")
    store.set("hf-token", "hf_SECRETVALUE123")
    assert store.get("hf-token") == "hf_SECRETVALUE123"
    path = tmp_path / "secrets" / "hf-token.enc.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert b"SECRETVALUE" not in path.read_bytes()
    assert json.loads(path.read_text())["kdf"]["name"] == "scrypt"
    store.delete("hf-token")
    assert store.get("hf-token") is None


def test_file_store_wrong_or_missing_passphrase(tmp_path):
    SecretStore(tmp_path, backend="file", passphrase="right").set("wallet", "0xabc")
    with pytest.raises(NodeError) as e:
        SecretStore(tmp_path, backend="file", passphrase="wrong").get("wallet")
    assert e.value.code == "wrong_passphrase"
    with pytest.raises(NodeError) as e:
        SecretStore(tmp_path, backend="file").get("wallet")
    assert e.value.code == "locked"


def test_secret_bound_to_its_name(tmp_path):
    # A ciphertext copied under another name must not decrypt (the name is authenticated data).
    store = SecretStore(tmp_path, backend="file", passphrase="pw")
    store.set("a", "one")
    (tmp_path / "secrets" / "b.enc.json").write_bytes((tmp_path / "secrets" / "a.enc.json").read_bytes())
    with pytest.raises(NodeError):
        store.get("b")


def test_keyring_backend_refused_without_keyring(tmp_path):
    with pytest.raises(NodeError) as e:
        SecretStore(tmp_path, backend="keyring")
    assert e.value.code == "no_keyring"
