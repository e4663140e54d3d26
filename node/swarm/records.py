"""The wire format of shared rollouts: what one peer publishes for one round.

A round record is msgpack of ``{"v": 2, "peer": str, "round": int, ["pf": int,] "groups": [{"task": [family,
config_id, seed, index], "q": question, "c": [completion, ...], "f": [finished, ...]}, ...]}``. It never carries
ground truth: receivers regenerate the answer from the task reference. ``pf`` is the prompt format the completions
answer (:data:`node.tasks.prompts.PROMPT_FORMAT`; absent means 1).

On the DHT (:mod:`node.swarm.dht`) a round record travels split: one *group record* per group (the same map with
``"i": index`` and a single ``"g": group`` instead of ``"groups"``, plus ``"t"``, an admission tag, in private
swarms), fetched one at a time, and one small *pointer* per peer and round in a sharded directory
(``{"v": 2, "peer", "round", "n": groups, "s": [indices of groups with reward spread]}``) from which receivers
sample peers. ``s`` is the publisher's own claim; receivers only use it to decide what to fetch first.

Every round number, wherever it comes from, must be within ``0..MAX_ROUND``: the decoders, the encoders, the
checkpoint loader and the round clock all use this one bound, so nothing a peer announces can produce a round our
own encoder refuses.

Records come from untrusted peers, so :func:`decode_record` is strict and total: any byte string either decodes to
a valid :class:`RoundRecord` or raises :class:`RecordRejected` with a short, stable reason (used as a metric label).
:func:`encode_record` applies the very same validation, so whatever we publish, every peer accepts.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from node.clock import MAX_ROUND
from node.tasks.taskref import TaskRef

SCHEMA_VERSION = 2
MAX_RECORD_BYTES = 512 * 1024  # one peer's record for one round (all its groups)
MAX_GROUP_RECORD_BYTES = 192 * 1024  # one group on the DHT: 64 x 2.5 KB completions and a long question
MAX_POINTER_BYTES = 512
MAX_SEALED_ENTRY_BYTES = 256 * 1024  # a sealed entry of any kind: a stage record (128 KiB) and its envelope
ADMISSION_TAG_BYTES = 16
MAX_GROUPS = 32
MAX_COMPLETIONS = 64
MAX_QUESTION_CHARS = 16_000
MAX_COMPLETION_CHARS = 16_000
MAX_FAMILY_CHARS = 64
MAX_PEER_ID_CHARS = 128  # libp2p ids are ~46-53 base58 chars

_MAX_INT = 2**63 - 1  # every integer field fits an int64 on any peer
# Unpacker limits: generous enough that a too-long array or string still decodes and is reported with its precise
# reason, yet a hostile payload cannot make us build huge containers. Longer arrays are "malformed".
_MAX_ARRAY_ITEMS = 4 * max(MAX_GROUPS, MAX_COMPLETIONS)
_MAX_MAP_ITEMS = 8
_RECORD_KEYS = frozenset({"v", "peer", "round", "groups"})
_GROUP_RECORD_KEYS = frozenset({"v", "peer", "round", "i", "g"})
_POINTER_KEYS = frozenset({"v", "peer", "round", "n", "s"})
_OPTIONAL_RECORD_KEYS = frozenset({"pf"})
_OPTIONAL_GROUP_RECORD_KEYS = frozenset({"pf", "t"})
_GROUP_KEYS = frozenset({"task", "q", "c", "f"})
_FAMILY_RE = re.compile(r"[A-Za-z0-9_.-]+")
_CONFIG_ID_RE = re.compile(r"[0-9a-f]{1,64}")


@dataclass(frozen=True)
class SharedGroup:
    task: TaskRef
    question: str
    completions: tuple[str, ...]
    finished: tuple[bool, ...]  # per completion: ended with end-of-sequence (False: cut at the token limit)


@dataclass(frozen=True)
class RoundRecord:
    peer_id: str
    round: int
    groups: tuple[SharedGroup, ...]
    prompt_format: int = 1  # which prompt recipe the completions answer; receivers train only on their own


@dataclass(frozen=True)
class GroupRecord:
    """One group of a peer's round record, as stored under its own DHT key."""

    peer_id: str
    round: int
    index: int
    group: SharedGroup
    prompt_format: int = 1

    def as_round_record(self) -> RoundRecord:
        return RoundRecord(peer_id=self.peer_id, round=self.round, groups=(self.group,), prompt_format=self.prompt_format)


@dataclass(frozen=True)
class Pointer:
    """A directory entry: this peer published ``groups`` groups for ``round``; ``spread`` lists those whose
    completions got different rewards under the publisher's verifier (its claim, used only to fetch first)."""

    peer_id: str
    round: int
    groups: int
    spread: tuple[int, ...] = ()


class RecordRejected(Exception):
    """A peer's record that we refuse; ``reason`` is a short stable snake_case label."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def encode_record(rec: RoundRecord) -> bytes:
    """Serialize ``rec``; raise ValueError if it breaks any limit (callers trim before encoding)."""
    payload = {
        "v": SCHEMA_VERSION,
        "peer": rec.peer_id,
        "round": rec.round,
        **({"pf": rec.prompt_format} if rec.prompt_format != 1 else {}),
        "groups": [_group_payload(g) for g in rec.groups],
    }
    return _pack(payload, _validate, MAX_RECORD_BYTES, "MAX_RECORD_BYTES")


def encode_group_record(rec: GroupRecord, *, admission_key: bytes | None = None) -> bytes:
    """Serialize one group for the DHT; with ``admission_key`` (a private swarm's) the record carries its tag."""
    payload: dict[str, Any] = {
        "v": SCHEMA_VERSION,
        "peer": rec.peer_id,
        "round": rec.round,
        "i": rec.index,
        **({"pf": rec.prompt_format} if rec.prompt_format != 1 else {}),
        "g": _group_payload(rec.group),
    }
    if admission_key is not None:
        payload["t"] = admission_tag(admission_key, payload)
    return _pack(payload, _validate_group_record, MAX_GROUP_RECORD_BYTES, "MAX_GROUP_RECORD_BYTES")


def encode_pointer(pointer: Pointer) -> bytes:
    payload = {
        "v": SCHEMA_VERSION, "peer": pointer.peer_id, "round": pointer.round, "n": pointer.groups,
        "s": list(pointer.spread),
    }
    return _pack(payload, _validate_pointer, MAX_POINTER_BYTES, "MAX_POINTER_BYTES")


def admission_tag(admission_key: bytes, payload: dict[str, Any]) -> bytes:
    """HMAC-SHA256 (truncated) of the group record without its tag: only holders of the swarm secret can make it."""
    body = msgpack.packb({k: v for k, v in payload.items() if k != "t"}, use_bin_type=True)
    return hmac.new(admission_key, body, hashlib.sha256).digest()[:ADMISSION_TAG_BYTES]


def admission_key(secret: str) -> bytes:
    """The key a private swarm's records are tagged with, derived from the secret in its invite."""
    return hashlib.sha256(b"rl-swarm admission v2\0" + secret.encode()).digest()


_SEALED_KEYS = frozenset({"e", "t"})


def seal_entry(admission_key: bytes, author: str, value: int | bytes) -> bytes:
    """A private swarm's envelope for a DHT entry that carries no tag of its own (a directory pointer, a clock or
    game position, a stage record): ``{"e": value, "t": tag}``, the tag an HMAC of the author and the value, so
    that no one without the secret can make one and no one can move a member's tag into an entry of their own."""
    return msgpack.packb({"e": value, "t": _entry_tag(admission_key, author, value)}, use_bin_type=True)


def unseal_entry(admission_key: bytes, author: str, raw: Any) -> int | bytes:
    """The value of an entry sealed by :func:`seal_entry`; RecordRejected("not_admitted") if it is not sealed
    with this swarm's key for this author."""
    payload = _unpack(raw, MAX_SEALED_ENTRY_BYTES)
    if not isinstance(payload, dict) or payload.keys() != _SEALED_KEYS:
        raise RecordRejected("not_admitted")
    value, tag = payload["e"], payload["t"]
    if type(value) not in (int, bytes) or type(tag) is not bytes:
        raise RecordRejected("not_admitted")
    if not hmac.compare_digest(tag, _entry_tag(admission_key, author, value)):
        raise RecordRejected("not_admitted")
    return value


def _entry_tag(admission_key: bytes, author: str, value: int | bytes) -> bytes:
    body = msgpack.packb(["entry", author, value], use_bin_type=True)
    return hmac.new(admission_key, body, hashlib.sha256).digest()[:ADMISSION_TAG_BYTES]


def validate_round(value: Any) -> int:
    """``value`` if it is a round number every peer accepts; ValueError otherwise (for config and checkpoints)."""
    if type(value) is not int or not 0 <= value <= MAX_ROUND:
        raise ValueError(f"{value!r} is not a round number (0..{MAX_ROUND})")
    return value


def _group_payload(g: SharedGroup) -> dict[str, Any]:
    return {
        "task": [g.task.family, g.task.config_id, g.task.seed, g.task.index],
        "q": g.question,
        "c": list(g.completions),
        "f": list(g.finished),
    }


def _pack(payload: dict[str, Any], validate: Callable[[Any], Any], limit: int, limit_name: str) -> bytes:
    try:
        validate(payload)
    except RecordRejected as e:
        raise ValueError(f"record would be rejected by peers: {e.reason}") from e
    raw = msgpack.packb(payload, use_bin_type=True)
    if len(raw) > limit:
        raise ValueError(f"record is {len(raw)} bytes, more than {limit_name}={limit}")
    return raw


def decode_record(raw: bytes) -> RoundRecord:
    """Parse and validate a peer's record; raises only :class:`RecordRejected`."""
    return _validate(_unpack(raw, MAX_RECORD_BYTES))


def decode_group_record(raw: bytes, *, admission_key: bytes | None = None) -> GroupRecord:
    """Parse and validate one group record; in a private swarm (``admission_key``) its tag must match."""
    payload = _unpack(raw, MAX_GROUP_RECORD_BYTES)
    record = _validate_group_record(payload)
    if admission_key is not None:
        tag = payload.get("t")
        if type(tag) is not bytes or not hmac.compare_digest(tag, admission_tag(admission_key, payload)):
            raise RecordRejected("not_admitted")
    return record


def decode_pointer(raw: bytes) -> Pointer:
    return _validate_pointer(_unpack(raw, MAX_POINTER_BYTES))


def _unpack(raw: Any, limit: int) -> Any:
    if not isinstance(raw, bytes):
        raise RecordRejected("malformed")
    if len(raw) > limit:
        raise RecordRejected("oversized")
    try:
        payload = msgpack.unpackb(
            raw,
            raw=False,
            strict_map_key=True,
            max_str_len=MAX_RECORD_BYTES,
            max_bin_len=MAX_RECORD_BYTES,
            max_array_len=_MAX_ARRAY_ITEMS,
            max_map_len=_MAX_MAP_ITEMS,
            max_ext_len=0,  # no ext types (timestamps included) are part of the schema
        )
    except (ValueError, msgpack.UnpackException, RecursionError) as e:
        raise RecordRejected("malformed") from e
    return payload


def _validate_header(payload: Any, required: frozenset[str], optional: frozenset[str]) -> tuple[str, int]:
    """The peer id and round of a record of any kind, after version and key-set checks."""
    if not isinstance(payload, dict):
        raise RecordRejected("malformed")
    if "v" in payload:  # checked before the key set: another version may well have other keys
        _require_type(payload["v"], int)
        if payload["v"] != SCHEMA_VERSION:
            raise RecordRejected("wrong_version")
    if not required <= payload.keys() <= required | optional:
        raise RecordRejected("malformed")
    peer_id = _require_type(payload["peer"], str)
    if not 0 < len(peer_id) <= MAX_PEER_ID_CHARS:
        raise RecordRejected("malformed")
    round_ = _require_type(payload["round"], int)
    if not 0 <= round_ <= MAX_ROUND:
        raise RecordRejected("round_out_of_range")
    return peer_id, round_


def _validate(payload: Any) -> RoundRecord:
    peer_id, round_ = _validate_header(payload, _RECORD_KEYS, _OPTIONAL_RECORD_KEYS)
    groups = _require_type(payload["groups"], list)
    if len(groups) > MAX_GROUPS:
        raise RecordRejected("too_many_groups")
    prompt_format = _require_int(payload.get("pf", 1), "malformed")
    return RoundRecord(
        peer_id=peer_id, round=round_, groups=tuple(_validate_group(g) for g in groups), prompt_format=prompt_format
    )


def _validate_group_record(payload: Any) -> GroupRecord:
    peer_id, round_ = _validate_header(payload, _GROUP_RECORD_KEYS, _OPTIONAL_GROUP_RECORD_KEYS)
    index = _require_type(payload["i"], int)
    if not 0 <= index < MAX_GROUPS:
        raise RecordRejected("too_many_groups")
    if "t" in payload and (type(payload["t"]) is not bytes or len(payload["t"]) != ADMISSION_TAG_BYTES):
        raise RecordRejected("malformed")
    return GroupRecord(
        peer_id=peer_id, round=round_, index=index, group=_validate_group(payload["g"]),
        prompt_format=_require_int(payload.get("pf", 1), "malformed"),
    )


def _validate_pointer(payload: Any) -> Pointer:
    peer_id, round_ = _validate_header(payload, _POINTER_KEYS, frozenset())
    groups = _require_type(payload["n"], int)
    if not 0 < groups <= MAX_GROUPS:
        raise RecordRejected("too_many_groups")
    spread = _require_type(payload["s"], list)
    if len(spread) > groups or any(type(i) is not int or not 0 <= i < groups for i in spread):
        raise RecordRejected("malformed")
    return Pointer(peer_id=peer_id, round=round_, groups=groups, spread=tuple(sorted(set(spread))))


def _validate_group(group: Any) -> SharedGroup:
    group = _require_type(group, dict)
    if group.keys() != _GROUP_KEYS:
        raise RecordRejected("malformed")
    task = _validate_task(group["task"])
    question = _require_type(group["q"], str)
    if len(question) > MAX_QUESTION_CHARS:
        raise RecordRejected("text_too_long")
    completions = _require_type(group["c"], list)
    if not completions:
        raise RecordRejected("empty_group")
    if len(completions) > MAX_COMPLETIONS:
        raise RecordRejected("too_many_completions")
    for completion in completions:
        if len(_require_type(completion, str)) > MAX_COMPLETION_CHARS:
            raise RecordRejected("text_too_long")
    finished = _require_type(group["f"], list)
    for flag in finished:
        _require_type(flag, bool)
    if len(finished) != len(completions):
        raise RecordRejected("malformed")
    return SharedGroup(task=task, question=question, completions=tuple(completions), finished=tuple(finished))


def _validate_task(task: Any) -> TaskRef:
    task = _require_type(task, list)
    if len(task) != 4:
        raise RecordRejected("malformed")
    family, config_id = _require_type(task[0], str), _require_type(task[1], str)
    seed, index = _require_int(task[2], "bad_task_ref"), _require_int(task[3], "bad_task_ref")
    if len(family) > MAX_FAMILY_CHARS or not _FAMILY_RE.fullmatch(family):
        raise RecordRejected("bad_task_ref")
    if not _CONFIG_ID_RE.fullmatch(config_id):
        raise RecordRejected("bad_task_ref")
    return TaskRef(family=family, config_id=config_id, seed=seed, index=index)


def _require_type(value: Any, expected: type) -> Any:
    # exact type match: bool is an int subclass, and a true/false must not pass for a number
    if type(value) is not expected:
        raise RecordRejected("wrong_type")
    return value


def _require_int(value: Any, out_of_range_reason: str) -> int:
    if not 0 <= _require_type(value, int) <= _MAX_INT:
        raise RecordRejected(out_of_range_reason)
    return value
