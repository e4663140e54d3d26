import os
import re
import stat

import pytest
from hivemind.p2p import PeerID

from node.errors import NodeError
from node.swarm.identity import ADJECTIVES, ANIMALS, backup, load_or_create, peer_id_from_public_key, peer_name, restore

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_create_then_load_is_stable(tmp_path):
    path = tmp_path / "node" / "identity.key"
    created = load_or_create(path)
    loaded = load_or_create(path)

    assert path.is_file()
    assert created.path == loaded.path == path
    assert created.peer_id == loaded.peer_id == PeerID.from_identity(path.read_bytes()).to_base58()
    assert created.name == loaded.name == peer_name(created.peer_id)
    assert created.private_key.to_bytes() == loaded.private_key.to_bytes()
    assert not list(path.parent.glob(".*tmp"))  # no temporary file left behind


@posix_only
def test_created_file_and_folder_are_owner_only(tmp_path):
    path = tmp_path / "node" / "identity.key"
    load_or_create(path)
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700


def test_peer_name_is_deterministic_adj_adj_animal():
    names = {peer_name(f"QmPeer{i}") for i in range(300)}
    assert len(names) > 250  # distinct ids rarely collide
    for name in names:
        first, second, animal = name.split("-")
        assert first in ADJECTIVES and second in ADJECTIVES and animal in ANIMALS
        assert first != second
    assert peer_name("QmSomePeer") == peer_name("QmSomePeer")


def test_word_lists_are_short_friendly_ascii():
    for words in (ADJECTIVES, ANIMALS):
        assert 90 <= len(words) == len(set(words))
        assert all(re.fullmatch(r"[a-z]{2,9}", word) for word in words)


def test_peer_id_from_public_key_matches_libp2p(tmp_path):
    identity = load_or_create(tmp_path / "identity.key")
    derived = peer_id_from_public_key(identity.private_key.get_public_key())
    assert derived == PeerID.from_identity(identity.path.read_bytes()).to_base58() == identity.peer_id


@pytest.mark.parametrize("content", [b"", b"not a key", b"\x08\x00\x12\x05hello", os.urandom(1200)])
def test_corrupt_file_is_a_node_error_with_hint(tmp_path, content):
    path = tmp_path / "identity.key"
    path.write_bytes(content)
    with pytest.raises(NodeError) as info:
        load_or_create(path)
    assert "backup" in info.value.hint and "peer id" in info.value.hint
    assert path.read_bytes() == content  # never replaced behind the user's back


@posix_only
def test_unreadable_file_is_a_node_error(tmp_path):
    path = tmp_path / "identity.key"
    load_or_create(path)
    path.chmod(0o000)
    if os.access(path, os.R_OK):
        pytest.skip("running as a user that ignores file permissions")
    with pytest.raises(NodeError):
        load_or_create(path)


@posix_only
def test_open_permissions_are_fixed(tmp_path, caplog):
    path = tmp_path / "identity.key"
    identity = load_or_create(path)
    path.chmod(0o644)
    assert load_or_create(path).peer_id == identity.peer_id
    assert mode(path) == 0o600
    assert "accessible to other users" in caplog.text


def test_backup_restore_roundtrip(tmp_path):
    original = load_or_create(tmp_path / "a" / "identity.key")
    backup(original, tmp_path / "backups" / "identity.bak")
    assert (tmp_path / "backups" / "identity.bak").read_bytes() == original.path.read_bytes()

    other_path = tmp_path / "b" / "identity.key"
    other = load_or_create(other_path)
    assert other.peer_id != original.peer_id
    restored = restore(tmp_path / "backups" / "identity.bak", other_path)
    assert restored.peer_id == original.peer_id == load_or_create(other_path).peer_id
    assert restored.path == other_path
    if os.name == "posix":
        assert mode(other_path) == 0o600
        assert mode(tmp_path / "backups" / "identity.bak") == 0o600


def test_restore_refuses_an_invalid_source(tmp_path):
    current = load_or_create(tmp_path / "identity.key")
    bad = tmp_path / "bad.bak"
    bad.write_bytes(b"garbage")
    with pytest.raises(NodeError):
        restore(bad, current.path)
    with pytest.raises(NodeError):
        restore(tmp_path / "missing.bak", current.path)
    assert load_or_create(current.path).peer_id == current.peer_id


def test_an_impossible_location_is_a_node_error(tmp_path):
    (tmp_path / "data").write_text("a file where the data folder should be")
    with pytest.raises(NodeError) as info:
        load_or_create(tmp_path / "data" / "identity.key")
    assert info.value.code == "identity_create_failed"


def test_an_identity_below_2048_bits_is_refused(tmp_path):
    """A 1024-bit key costs ~25 ms to mint: peers refuse such identities, so we never run with one."""
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
    from hivemind.proto import crypto_pb2

    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    der = small.private_bytes(Encoding.DER, PrivateFormat.TraditionalOpenSSL, NoEncryption())
    path = tmp_path / "identity.key"
    path.write_bytes(crypto_pb2.PrivateKey(key_type=crypto_pb2.KeyType.RSA, data=der).SerializeToString())
    with pytest.raises(NodeError, match="1024 bits"):
        load_or_create(path)


def test_a_key_file_written_by_hivemind_loads_as_the_same_peer(tmp_path):
    from hivemind.proto import crypto_pb2
    from hivemind.utils.crypto import RSAPrivateKey

    key = RSAPrivateKey()
    path = tmp_path / "identity.key"
    path.write_bytes(crypto_pb2.PrivateKey(key_type=crypto_pb2.KeyType.RSA, data=key.to_bytes()).SerializeToString())
    identity = load_or_create(path)
    assert identity.peer_id == PeerID.from_identity(path.read_bytes()).to_base58()
    assert identity.private_key.to_bytes() == key.to_bytes()
    assert crypto_pb2.PrivateKey.FromString(path.read_bytes()).data == key.to_bytes()  # left as it was


def test_reading_and_creating_an_identity_imports_neither_hivemind_nor_torch(tmp_path):
    # the wizard asks `rl-swarm-node identity` for the peer's name: an import of torch would make the user wait seconds
    from tests.fresh_imports import run_and_list_imports

    printed, imported = run_and_list_imports(
        "from pathlib import Path; from node.swarm.identity import load_or_create; "
        f"print(load_or_create(Path({str(tmp_path / 'identity.key')!r})).name)", ("torch", "hivemind"))
    assert printed == [load_or_create(tmp_path / "identity.key").name] and imported == []
