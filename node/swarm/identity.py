"""The node's persistent peer identity.

The identity file is exactly what hivemind/libp2p read with ``identity_path``: a protobuf ``crypto.pb.PrivateKey``
wrapping a DER-encoded RSA-2048 key. The same key signs our DHT records, so the peer id other peers see in the
network and the owner of a record are provably the same node (see :func:`peer_id_from_public_key`).

Losing the file means losing the peer id (and everything the swarm associates with it), hence backup/restore and
the care taken to never leave a half-written or world-readable key on disk.

Reading, creating and naming an identity needs neither hivemind nor torch (``rl-swarm-node identity`` answers the
app's wizard at once): the two libp2p messages are built here from their schema, and hivemind's key type is made
only when the DHT asks for it (:attr:`Identity.private_key`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import base58
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from node.errors import NodeError

if TYPE_CHECKING:
    from hivemind.utils.crypto import RSAPrivateKey, RSAPublicKey

logger = logging.getLogger(__name__)

_FILE_MODE = 0o600  # owner read/write: backups and restores must be able to replace the file
_DIR_MODE = 0o700
_SHA2_256_MULTIHASH_PREFIX = bytes([0x12, 32])  # multihash code of sha2-256, then the digest length
# Peer keys we accept, ours and other peers' alike: 1024-bit keys are cheap enough to mint by the thousand (~25 ms
# each) and to factor for a well-funded attacker; keys far above 4096 bits make every signature check expensive.
MIN_RSA_BITS, MAX_RSA_BITS = 2048, 4096

ADJECTIVES = (
    "able", "agile", "amber", "amiable", "azure", "bold", "brave", "breezy", "bright", "brisk",
    "calm", "candid", "cheery", "clever", "cobalt", "cosmic", "cozy", "crisp", "curious", "daring",
    "dapper", "dazzling", "deft", "eager", "earnest", "easy", "electric", "fair", "fancy", "fearless",
    "fleet", "fluffy", "frosty", "gentle", "giddy", "gleaming", "glad", "golden", "graceful", "grand",
    "happy", "hardy", "hasty", "hazel", "honest", "humble", "icy", "jolly", "jovial", "keen",
    "kind", "lively", "lucky", "lunar", "mellow", "merry", "mighty", "misty", "modest", "nimble",
    "noble", "patient", "peppy", "plucky", "polite", "proud", "quick", "quiet", "radiant", "rapid",
    "rosy", "rustic", "savvy", "serene", "shiny", "silent", "silver", "sleek", "smooth", "snowy",
    "solar", "spry", "steady", "stellar", "sturdy", "sunny", "swift", "tidy", "tranquil", "trusty",
    "twinkly", "upbeat", "velvet", "vivid", "warm", "wild", "wise", "witty", "zany", "zesty",
)  # fmt: skip

ANIMALS = (
    "alpaca", "badger", "bat", "bear", "beaver", "bee", "bison", "boar", "bobcat", "buffalo",
    "camel", "caribou", "cat", "cheetah", "chipmunk", "condor", "cougar", "coyote", "crab", "crane",
    "crow", "deer", "dingo", "dolphin", "donkey", "dove", "duck", "eagle", "elk", "emu",
    "falcon", "ferret", "finch", "fox", "frog", "gazelle", "gecko", "gerbil", "gibbon", "giraffe",
    "goat", "goose", "gorilla", "hamster", "hare", "hawk", "hedgehog", "heron", "hippo", "horse",
    "ibis", "iguana", "impala", "jaguar", "jay", "kangaroo", "kiwi", "koala", "lemur", "leopard",
    "lion", "llama", "lobster", "lynx", "magpie", "marmot", "meerkat", "mink", "mole", "moose",
    "moth", "mouse", "newt", "ocelot", "octopus", "okapi", "orca", "osprey", "otter", "owl",
    "ox", "panda", "panther", "parrot", "pelican", "penguin", "pigeon", "puffin", "quail", "rabbit",
    "raccoon", "raven", "robin", "salmon", "seal", "shark", "sheep", "sloth", "snail", "sparrow",
    "squid", "stork", "swan", "tapir", "tiger", "toucan", "trout", "turtle", "walrus", "weasel",
    "whale", "wolf", "wombat", "wren", "yak", "zebra",
)  # fmt: skip


def _libp2p_key_messages() -> tuple[type, type]:
    """libp2p's ``crypto.proto`` (proto2; the schema hivemind ships): ``PublicKey`` and ``PrivateKey``, each a
    required key type and the key's bytes."""
    schema = descriptor_pb2.FileDescriptorProto(name="rl_swarm/libp2p_crypto.proto", package="rl_swarm.crypto.pb",
                                                syntax="proto2")
    schema.enum_type.add(name="KeyType").value.add(name="RSA", number=_RSA)
    for name in ("PublicKey", "PrivateKey"):
        message = schema.message_type.add(name=name)
        message.field.add(name="key_type", number=1, label=descriptor_pb2.FieldDescriptorProto.LABEL_REQUIRED,
                          type=descriptor_pb2.FieldDescriptorProto.TYPE_ENUM, type_name=".rl_swarm.crypto.pb.KeyType")
        message.field.add(name="data", number=2, label=descriptor_pb2.FieldDescriptorProto.LABEL_REQUIRED,
                          type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(schema)
    public, private = (message_factory.GetMessageClass(pool.FindMessageTypeByName(f"rl_swarm.crypto.pb.{name}"))
                       for name in ("PublicKey", "PrivateKey"))
    return public, private


_RSA = 0  # KeyType.RSA
_PublicKeyMessage, _PrivateKeyMessage = _libp2p_key_messages()


@dataclass
class Identity:
    path: Path
    peer_id: str  # libp2p peer id, base58
    name: str  # readable alias of peer_id, e.g. "swift-amber-otter"
    der: bytes = field(repr=False)  # the libp2p identity key (DER, PKCS#1 RSA); also signs our DHT records

    @property
    def private_key(self) -> RSAPrivateKey:
        """The key as hivemind's signer takes it (imports hivemind, hence torch: only the DHT asks)."""
        from hivemind.utils.crypto import RSAPrivateKey

        private_key = RSAPrivateKey.__new__(RSAPrivateKey)  # __init__ would generate a fresh key
        private_key.__setstate__({"_private_key": self.der})
        return private_key


def load_or_create(path: Path) -> Identity:
    """Load the identity at ``path``, creating a new one if the file does not exist yet."""
    path = Path(path)
    if not path.exists():
        try:
            _write_private(path, _generate_identity_bytes())
        except OSError as e:
            raise NodeError(
                f"Could not create the identity file {path}: {e.strerror or e}",
                hint="Check that the node's data folder is writable.",
                code="identity_create_failed",
            ) from e
        identity = _load(path)
        logger.info("Created a new identity %s (%s) in %s", identity.name, identity.peer_id, path)
        return identity
    identity = _load(path)
    _tighten_permissions(path)
    return identity


def backup(identity: Identity, dest: Path) -> None:
    """Copy the identity file to ``dest`` (created owner-only, replaced atomically)."""
    dest = Path(dest)
    data = _read(identity.path)
    _parse(data, identity.path)
    try:
        _write_private(dest, data)
    except OSError as e:
        raise NodeError(
            f"Could not write the identity backup to {dest}: {e.strerror or e}",
            hint="Choose a folder you can write to.",
            code="identity_backup_failed",
        ) from e


def restore(src: Path, path: Path) -> Identity:
    """Replace the identity at ``path`` with the one in ``src``, which must be a valid identity file."""
    src, path = Path(src), Path(path)
    data = _read(src)
    _parse(data, src)
    try:
        _write_private(path, data)
    except OSError as e:
        raise NodeError(
            f"Could not write the identity file {path}: {e.strerror or e}",
            hint="Check that the node's data folder is writable.",
            code="identity_restore_failed",
        ) from e
    return _load(path)


def peer_name(peer_id: str) -> str:
    """A readable, deterministic alias of a peer id: two different adjectives and an animal."""
    digest = hashlib.sha256(peer_id.encode()).digest()
    first = int.from_bytes(digest[0:8], "big") % len(ADJECTIVES)
    # pick the second adjective among the others, so a name never repeats a word
    second = (first + 1 + int.from_bytes(digest[8:16], "big") % (len(ADJECTIVES) - 1)) % len(ADJECTIVES)
    animal = int.from_bytes(digest[16:24], "big") % len(ANIMALS)
    return f"{ADJECTIVES[first]}-{ADJECTIVES[second]}-{ANIMALS[animal]}"


def peer_id_from_public_key(public_key: RSAPublicKey) -> str:
    """The libp2p peer id of a peer's RSA key, as hivemind hands it over (a record's signer)."""
    return _peer_id(serialization.load_ssh_public_key(public_key.to_bytes()))


def _peer_id(key: rsa.RSAPublicKey) -> str:
    """base58 of the sha2-256 multihash of the protobuf-wrapped DER key (libp2p's peer-id spec, for keys whose
    wrapped form is over 42 bytes: every RSA key)."""
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    wrapped = _PublicKeyMessage(key_type=_RSA, data=der).SerializeToString()
    return base58.b58encode(_SHA2_256_MULTIHASH_PREFIX + hashlib.sha256(wrapped).digest()).decode()


def acceptable_key_size(public_key: RSAPublicKey) -> bool:
    """Whether a peer's RSA key has between :data:`MIN_RSA_BITS` and :data:`MAX_RSA_BITS` bits."""
    return MIN_RSA_BITS <= public_key._public_key.key_size <= MAX_RSA_BITS


def _generate_identity_bytes() -> bytes:
    # Same format as hivemind's P2P.generate_identity, which we do not call: it writes the key with the default
    # umask (briefly readable by others) and then makes it read-only, which breaks restoring over it. The key is
    # hivemind's RSAPrivateKey's: 2048 bits, public exponent 65537, DER in the traditional (PKCS#1) format.
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.TraditionalOpenSSL,
                            serialization.NoEncryption())
    return _PrivateKeyMessage(key_type=_RSA, data=der).SerializeToString()


def _load(path: Path) -> Identity:
    data = _read(path)
    der, key = _parse(data, path)
    peer_id = _peer_id(key.public_key())
    return Identity(path=path, peer_id=peer_id, name=peer_name(peer_id), der=der)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as e:
        raise NodeError(f"Identity file {path} does not exist", hint="Check the path.", code="identity_missing") from e
    except OSError as e:
        raise NodeError(
            f"Could not read the identity file {path}: {e.strerror or e}",
            hint="Check that your user owns the file and may read it.",
            code="identity_unreadable",
        ) from e


def _parse(data: bytes, path: Path) -> tuple[bytes, rsa.RSAPrivateKey]:
    """The key's DER bytes and the key, from an identity file's bytes."""
    try:
        wrapped = _PrivateKeyMessage.FromString(data)
        if wrapped.key_type != _RSA:
            raise ValueError("not an RSA key")
        der = wrapped.data
        key = serialization.load_der_private_key(der, password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("not an RSA key")
        if not MIN_RSA_BITS <= key.key_size <= MAX_RSA_BITS:
            raise ValueError(f"an RSA key of {key.key_size} bits; peers accept {MIN_RSA_BITS} to {MAX_RSA_BITS}")
    except (DecodeError, ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise NodeError(
            f"The identity file {path} is corrupt or not a peer identity ({e})",
            hint=(
                "Restore it from a backup. Deleting it makes the node create a new identity on the next start, "
                "but your old peer id (and the swarm's record of your contributions) would be lost."
            ),
            code="identity_corrupt",
        ) from e
    return der, key


def _tighten_permissions(path: Path) -> None:
    if os.name != "posix":
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    if not mode & 0o077:
        return
    try:
        path.chmod(_FILE_MODE)
    except OSError as e:
        logger.warning("Identity file %s is accessible to other users (mode %o), cannot fix: %s", path, mode, e)
        return
    logger.warning("Identity file %s was accessible to other users (mode %o); now %o", path, mode, _FILE_MODE)


def _write_private(path: Path, data: bytes) -> None:
    """Atomically write ``data`` to ``path``, readable by the owner only from the first byte on."""
    path.parent.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _FILE_MODE)  # O_CREAT ignores the mode of a leftover tmp file
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
