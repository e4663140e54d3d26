"""The wire format of shared rollouts: what one peer publishes for one round.

A record is msgpack of ``{"v": 1, "peer": str, "round": int, ["pf": int,] "groups": [{"task": [family, config_id,
seed, index], "q": question, "c": [completion, ...], "f": [finished, ...]}, ...]}``. It never carries ground truth:
receivers regenerate the answer from the task reference. ``pf`` is the prompt format the completions answer
(:data:`node.prompts.PROMPT_FORMAT`; absent means 1).

Records come from untrusted peers, so :func:`decode_record` is strict and total: any byte string either decodes to
a valid :class:`RoundRecord` or raises :class:`RecordRejected` with a short, stable reason (used as a metric label).
:func:`encode_record` applies the very same validation, so whatever we publish, every peer accepts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgpack

from node.taskref import TaskRef

SCHEMA_VERSION = 1
MAX_RECORD_BYTES = 512 * 1024  # one peer's record for one round (all its groups)
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
_OPTIONAL_RECORD_KEYS = frozenset({"pf"})
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
        "groups": [
            {
                "task": [g.task.family, g.task.config_id, g.task.seed, g.task.index],
                "q": g.question,
                "c": list(g.completions),
                "f": list(g.finished),
            }
            for g in rec.groups
        ],
    }
    try:
        _validate(payload)
    except RecordRejected as e:
        raise ValueError(f"record would be rejected by peers: {e.reason}") from e
    raw = msgpack.packb(payload, use_bin_type=True)
    if len(raw) > MAX_RECORD_BYTES:
        raise ValueError(f"record is {len(raw)} bytes, more than MAX_RECORD_BYTES={MAX_RECORD_BYTES}")
    return raw


def decode_record(raw: bytes) -> RoundRecord:
    """Parse and validate a peer's record; raises only :class:`RecordRejected`."""
    if not isinstance(raw, bytes):
        raise RecordRejected("malformed")
    if len(raw) > MAX_RECORD_BYTES:
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
    return _validate(payload)


def _validate(payload: Any) -> RoundRecord:
    if not isinstance(payload, dict):
        raise RecordRejected("malformed")
    if "v" in payload:  # checked before the key set: another version may well have other keys
        _require_type(payload["v"], int)
        if payload["v"] != SCHEMA_VERSION:
            raise RecordRejected("wrong_version")
    if not _RECORD_KEYS <= payload.keys() <= _RECORD_KEYS | _OPTIONAL_RECORD_KEYS:
        raise RecordRejected("malformed")

    peer_id = _require_type(payload["peer"], str)
    if not 0 < len(peer_id) <= MAX_PEER_ID_CHARS:
        raise RecordRejected("malformed")
    round_ = _require_int(payload["round"], "malformed")
    groups = _require_type(payload["groups"], list)
    if len(groups) > MAX_GROUPS:
        raise RecordRejected("too_many_groups")
    prompt_format = _require_int(payload.get("pf", 1), "malformed")
    return RoundRecord(
        peer_id=peer_id, round=round_, groups=tuple(_validate_group(g) for g in groups), prompt_format=prompt_format
    )


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
