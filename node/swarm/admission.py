"""A private swarm's admission secret: kept in the secret store per swarm, never in a config file or a log.

In a private swarm every group record carries an HMAC tag made with a key derived from this secret
(:func:`node.swarm.records.admission_key`), so only nodes that were given the secret are heard. It travels in the invite
(:mod:`node.swarm.invite`) and is stored in :mod:`node.secret_store` (the OS keyring, else the passphrase-encrypted file
store), per data folder and swarm name, when a node joins with an invite that carries one or creates a private swarm
(an invite without one leaves it: an invite written by hand or by an older version may lack it); the runner reads it when it
builds the DHT exchange, and ``rl-swarm-node run --no-private`` forgets it. Configs of earlier versions held it in
plaintext as ``[swarm] admission_secret``: loading such a file moves the secret into the store and removes it from
the file.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from pathlib import Path

from node.errors import NodeError
from node.secret_store import drop_plaintext, explain_locked, node_store

log = logging.getLogger(__name__)

LEGACY_FIELD = "admission_secret"  # its name under [swarm] in earlier configs
# Printable ASCII without spaces, so it survives copy and paste and a URL query; long enough not to be guessed.
_SECRET = re.compile(r"^[\x21-\x7e]{16,256}$")


def secret_name(swarm_name: str) -> str:
    """The store's name for a swarm's secret: swarm names are case-sensitive and up to 64 characters, the store's
    names lower-case and as long at most, so the name is a digest."""
    return "swarm-" + hashlib.sha256(swarm_name.encode()).hexdigest()[:32]


def check_secret(secret: object) -> str:
    if not isinstance(secret, str) or not _SECRET.match(secret):
        raise NodeError(
            "The swarm's admission secret is not valid: it must be 16 to 256 printable characters without spaces.",
            hint="ask a member of the swarm for a fresh invite", code="bad_admission_secret",
        )
    return secret


def load(data_dir: Path, swarm_name: str, passphrase: str | None = None) -> str | None:
    """The swarm's secret, or None when the swarm is public (none was stored for it)."""
    try:
        return node_store(data_dir, passphrase).get(secret_name(swarm_name))
    except NodeError as exc:
        raise explain_locked(exc, f"the admission secret of the private swarm {swarm_name!r} cannot be read") \
            from None


def remember(data_dir: Path, swarm_name: str, secret: str, passphrase: str | None = None) -> None:
    try:
        node_store(data_dir, passphrase).set(secret_name(swarm_name), check_secret(secret))
    except NodeError as exc:
        raise explain_locked(exc, f"the admission secret of the private swarm {swarm_name!r} cannot be stored") \
            from None


def exists(data_dir: Path, swarm_name: str) -> bool:
    """Whether the swarm is private (a secret is stored for it); needs no passphrase, so a caller can ask for one only
    when it will be needed."""
    return node_store(data_dir).has(secret_name(swarm_name))


def forget(data_dir: Path, swarm_name: str) -> None:
    node_store(data_dir).delete(secret_name(swarm_name))


def create(data_dir: Path, swarm_name: str, passphrase: str | None = None) -> str:
    """The swarm's secret, made and stored now when it has none yet (a new private swarm)."""
    secret = load(data_dir, swarm_name, passphrase)
    if secret is None:
        secret = secrets.token_urlsafe(32)
        remember(data_dir, swarm_name, secret, passphrase)
    return secret


def move_out_of_config(path: Path, data_dir: Path, swarm_name: str, secret: str) -> None:
    """Store the plaintext secret of an earlier version's config file, then rewrite the file without it."""
    remember(data_dir, swarm_name, secret)
    drop_plaintext(path, "swarm", LEGACY_FIELD)
    log.warning("moved the admission secret of swarm %r out of %s into the secret store", swarm_name, path)
