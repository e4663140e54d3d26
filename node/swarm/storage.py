"""What a node stores for the swarm: bounded in bytes, per signer, per network address and per key, and fair.

hivemind stores whatever a peer sends that the validator accepts. Identities are free, so counting anything per
identity alone can be bought; a network address cannot be minted as cheaply. So every entry is charged to its signer
(the owner key in its subkey) and to the address group of the peer that sent it (:mod:`node.swarm.peer_addresses`: /24
for IPv4, /48 for IPv6), and each has a quota: a signer at most ``signer_share`` of the storage, an address group at
most ``group_share``. A signer or group over its quota makes room from its own oldest entries, never from anyone else's.
When the whole storage or one key (a directory shard) is full, a newcomer makes room from the address group that
holds the most there, unless that is its own: whoever came first cannot keep a later honest entry out. Entries
keyed by a round (groups, directory pointers, stage records) are stored for others only for rounds near the round
this node plays (``rounds``, a function of it).

Accounting is incremental; entries that expired are given back once a second, or whenever a quota would refuse.
Our own entries (stored by this node, not sent by a peer) are charged to no address group.
"""

from __future__ import annotations

import contextvars
import hashlib
import re
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hivemind.dht.routing import DHTID
from hivemind.dht.storage import DHTLocalStorage, DictionaryDHTValue

MAX_ENTRIES_PER_KEY = 256  # directory and clock shards: 256 x ~1 KB signed entries
ROUNDS_BEHIND, ROUNDS_AHEAD = 16, 16  # rounds around ours whose entries we store for others
SIGNER_SHARE = 1 / 8  # of the storage, for one signer's entries
GROUP_SHARE = 1 / 4  # of the storage, for the entries one address group sent
_ENTRY_OVERHEAD = 64  # bytes of bookkeeping per entry, so that a flood of tiny entries is charged too
_RECONCILE_EVERY_S = 1.0
_AUTHORS_KEPT = 16384  # authors whose sending address group we remember
_ROUND_KEYED = frozenset(b"gds")  # the kinds of entry whose key names a round (node.swarm.dht's layout)
_SUBKEY_RE = re.compile(rb"(\[owner:.+?\])\|([a-z])/([0-9]{1,14})(?:/[0-9/]{1,40})?")

# The address group of the peer whose store request is being served (node.swarm.dht sets it around hivemind's
# rpc_store); None while this node stores its own entries.
SENDER_GROUP: contextvars.ContextVar[str | None] = contextvars.ContextVar("dht_sender_group", default=None)


def rounds_near(current: int) -> tuple[int, int]:
    """The rounds (first, last) whose entries we store for others while we play ``current``."""
    return max(0, current - ROUNDS_BEHIND), current + ROUNDS_AHEAD


def _value_bytes(value: Any) -> int:
    if isinstance(value, DictionaryDHTValue):
        return sum(len(v.value) + _ENTRY_OVERHEAD for _, v in list(value.items()))
    return len(value) if isinstance(value, bytes) else _ENTRY_OVERHEAD


@dataclass
class _Entry:
    signer: bytes
    group: str | None  # None: our own
    size: int


class BoundedStorage(DHTLocalStorage):
    """hivemind's local storage with quotas per signer, per address group and per key, and a cap on bytes.

    ``rounds`` gives the (first, last) round whose round-keyed entries a peer may store here, or None to store any.
    ``author_of`` names an entry's author (peer id) from its subkey, so that :meth:`group_of_author` can say from
    which address group a peer's entries reached us. ``refused`` counts refusals by reason, ``refused_from`` by the
    address group that sent them, ``evicted`` the entries that made room.
    """

    def __init__(self, max_bytes: int, max_entries_per_key: int = MAX_ENTRIES_PER_KEY, *,
                 signer_share: float = SIGNER_SHARE, group_share: float = GROUP_SHARE,
                 rounds: Callable[[], tuple[int, int] | None] = lambda: None,
                 author_of: Callable[[bytes], str | None] = lambda subkey: None) -> None:
        super().__init__()
        self.max_bytes = max_bytes
        self.max_entries_per_key = max_entries_per_key
        self.signer_share, self.group_share = signer_share, group_share
        self.rounds = rounds
        self._author_of = author_of
        self._author_groups: OrderedDict[str, str] = OrderedDict()
        self.refused: Counter[str] = Counter()
        self.refused_from: Counter[str] = Counter()  # address group that sent the entries refused ("self": ours)
        self.evicted = 0
        self._entries: dict[tuple[DHTID, Any], _Entry] = {}
        self._by_signer: dict[bytes, OrderedDict[tuple[DHTID, Any], None]] = {}  # oldest first
        self._by_group: dict[str | None, OrderedDict[tuple[DHTID, Any], None]] = {}
        self._signer_bytes: Counter[bytes] = Counter()
        self._group_bytes: Counter[str | None] = Counter()
        self._used = 0
        self._reconciled_at = -float("inf")

    # ------------------------------------------------------------------------------------------- storing
    def store(self, key, value, expiration_time, subkey=None) -> bool:
        if subkey is not None:
            return self.store_subkey(key, subkey, value, expiration_time)
        # a whole value: what hivemind caches of our own reads (the validator refuses values without a subkey from
        # peers), within the byte cap only
        size = _value_bytes(value)
        if time.monotonic() - self._reconciled_at > _RECONCILE_EVERY_S or self._used + size > self.max_bytes:
            self.reconcile()
        if self._used + size > self.max_bytes:
            self._refuse("full", None)
            return False
        if not super().store(key, value, expiration_time):
            return False
        self._forget((key, None))
        self._remember((key, None), _Entry(b"", None, size))
        return True

    def store_subkey(self, key, subkey, value, expiration_time) -> bool:
        group = SENDER_GROUP.get()
        match = _SUBKEY_RE.fullmatch(subkey) if type(subkey) is bytes else None
        if match is None:
            self._refuse("not_an_entry", group)
            return False
        if group is not None:  # signed and valid (the validator ran first): stored or not, it came from that network
            self._remember_author(subkey, group)
        if group is not None and match.group(2)[0] in _ROUND_KEYED and not self._round_near(int(match.group(3))):
            self._refuse("round_not_near", group)
            return False
        signer = hashlib.blake2b(match.group(1), digest_size=16).digest()
        size = (len(value) if isinstance(value, bytes) else 9) + len(subkey) + _ENTRY_OVERHEAD
        entry_id = (key, subkey)
        if time.monotonic() - self._reconciled_at > _RECONCILE_EVERY_S:
            self.reconcile()
        if not self._make_room(entry_id, key, signer, group, size):
            return False
        if not super().store_subkey(key, subkey, value, expiration_time):
            return False  # hivemind keeps a newer value of the same entry
        self._forget(entry_id)
        self._remember(entry_id, _Entry(signer, group, size))
        return True

    def _remember_author(self, subkey: bytes, group: str) -> None:
        author = self._author_of(subkey)
        if author is not None:
            self._author_groups[author] = group
            self._author_groups.move_to_end(author)
            if len(self._author_groups) > _AUTHORS_KEPT:
                self._author_groups.popitem(last=False)

    def group_of_author(self, author: str) -> str | None:
        """The address group that last sent us an entry signed by ``author`` (a peer id), stored or refused."""
        return self._author_groups.get(author)

    def _refuse(self, reason: str, group: str | None) -> None:
        self.refused[reason] += 1
        self.refused_from["self" if group is None else group] += 1

    def _round_near(self, round_: int) -> bool:
        window = self.rounds()
        return window is None or window[0] <= round_ <= window[1]

    def _make_room(self, entry_id, key, signer: bytes, group: str | None, size: int) -> bool:
        """Evict what must go for this entry to fit every bound; False (nothing evicted) if it cannot fit."""
        replaced = self._entries.get(entry_id)
        plan: dict[tuple[DHTID, Any], int] = {entry_id: replaced.size} if replaced is not None else {}

        def held(index: dict, bytes_: Counter, owner: Any) -> int:  # bytes of ``owner`` once the plan is carried out
            queue = index.get(owner, ())
            return bytes_[owner] - sum(used for e, used in plan.items() if e in queue)

        def plan_oldest(index: dict, owner: Any, key_only: DHTID | None = None) -> bool:
            for candidate in index.get(owner, ()):
                if candidate not in plan and (key_only is None or candidate[0] == key_only):
                    plan[candidate] = self._entries[candidate].size
                    return True
            return False

        # a signer's and an address group's own oldest entries make room for their newest
        group_limit = self.group_share * self.max_bytes if group is not None else float("inf")
        for index, bytes_, owner, limit in ((self._by_signer, self._signer_bytes, signer,
                                             self.signer_share * self.max_bytes),
                                            (self._by_group, self._group_bytes, group, group_limit)):
            if size > limit:
                self._refuse("entry_too_large", group)
                return False
            while held(index, bytes_, owner) + size > limit:
                if not plan_oldest(index, owner):
                    self._refuse("quota", group)
                    return False
        # a full key: the address group holding most of it gives way, unless the newcomer's holds about as much
        item = super().get(key) if replaced is None else None
        if item is not None and isinstance(item.value, DictionaryDHTValue):
            live = [(key, sub) for sub, _ in item.value.items() if (key, sub) not in plan]
            if len(live) >= self.max_entries_per_key:
                holders = Counter(self._entries[e].group if e in self._entries else None for e in live)
                top, count = max(holders.items(), key=lambda kv: kv[1])
                if top == group or count <= holders.get(group, 0) + 1 or not plan_oldest(self._by_group, top, key):
                    self._refuse("key_full", group)
                    return False
        # a full storage: the address group holding the most bytes gives way, unless the newcomer's holds as much
        while self._used - sum(plan.values()) + size > self.max_bytes:
            holding = {g: held(self._by_group, self._group_bytes, g) for g in self._group_bytes}
            top = max(holding, key=holding.__getitem__)
            if top == group or holding[top] <= holding.get(group, 0) + size or not plan_oldest(self._by_group, top):
                self._refuse("full", group)
                return False
        for victim in plan:
            if victim != entry_id:
                self._evict(victim)
        return True

    def _evict(self, entry_id) -> None:
        key, subkey = entry_id
        item = super().get(key)
        if item is not None and subkey is None:
            del self[key]
        elif item is not None and isinstance(item.value, DictionaryDHTValue):
            del item.value[subkey]
            if not item.value:
                del self[key]
        self._forget(entry_id)
        self.evicted += 1

    # ------------------------------------------------------------------------------------------ accounting
    def _remember(self, entry_id, entry: _Entry) -> None:
        self._entries[entry_id] = entry
        self._by_signer.setdefault(entry.signer, OrderedDict())[entry_id] = None
        self._by_group.setdefault(entry.group, OrderedDict())[entry_id] = None
        self._signer_bytes[entry.signer] += entry.size
        self._group_bytes[entry.group] += entry.size
        self._used += entry.size

    def _forget(self, entry_id) -> None:
        entry = self._entries.pop(entry_id, None)
        if entry is None:
            return
        for index, bytes_, owner in ((self._by_signer, self._signer_bytes, entry.signer),
                                     (self._by_group, self._group_bytes, entry.group)):
            queue = index[owner]
            del queue[entry_id]
            bytes_[owner] -= entry.size
            if not queue:
                del index[owner], bytes_[owner]
        self._used -= entry.size

    def reconcile(self) -> None:
        """Give back the bytes of entries that expired (hivemind drops them silently)."""
        self._reconciled_at = time.monotonic()
        live: set[tuple[DHTID, Any]] = set()
        for key, item in list(self.items()):
            live.add((key, None))
            if isinstance(item.value, DictionaryDHTValue):
                live.update((key, subkey) for subkey, _ in item.value.items())
        for entry_id in [e for e in self._entries if e not in live]:
            self._forget(entry_id)

    def measure(self) -> int:
        """Bytes of the live entries now (expired ones are dropped on the way)."""
        self.reconcile()
        return self._used

    def usage(self) -> dict[str, Any]:
        """Bytes now held per address group that sent them ("self" for our own entries and what we cached), and
        the most any one signer holds."""
        self.reconcile()
        return {"by_group": {("self" if group is None else group): used for group, used in self._group_bytes.items()},
                "largest_signer": max((used for signer, used in self._signer_bytes.items() if signer), default=0)}

