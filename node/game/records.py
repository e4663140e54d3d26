"""The wire format of the game: what one peer publishes for one stage of one round.

A stage record is msgpack of ``{"v": 1, "peer": str, "round": int, "stage": 1|2|3, "items": [{"task": [family,
config_id, seed, index], "q": question, "text": completion, "shown": [answer value, ...]}, ...]}``:

- stage 1 (answer): per question, the best answer completion; ``shown`` is empty;
- stage 2 (critique): per question, the best critique and, in the order the critic saw them, the answer values it
  judged (its letters A, B, ... name them); receivers parse the critique themselves;
- stage 3 (revise): per question, the best final completion; ``shown`` is empty.

No record carries ground truth or a score: receivers regenerate the task from its reference and judge every text
with their own verifier. Like :mod:`node.swarm.records`, decoding is strict and total (any byte string decodes to a
valid :class:`StageRecord` or raises :class:`~node.swarm.records.RecordRejected`), and encoding applies the same
validation, so whatever we publish, every peer accepts. Records are signed where they are stored (see
:mod:`node.game.exchange`): the DHT entry is owned by the author's key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from node.game import STAGES
from node.swarm.records import MAX_PEER_ID_CHARS, RecordRejected, _require_int, _require_type, _validate_task
from node.tasks.taskref import TaskRef

SCHEMA_VERSION = 1
MAX_STAGE_RECORD_BYTES = 128 * 1024
MAX_ITEMS = 16  # questions per round
MAX_TEXT_CHARS = 4000  # a completion (answers are cut to this before publishing)
MAX_QUESTION_CHARS = 4000
MAX_SHOWN = 8
MAX_SHOWN_CHARS = 64

_RECORD_KEYS = frozenset({"v", "peer", "round", "stage", "items"})
_ITEM_KEYS = frozenset({"task", "q", "text", "shown"})
_CRITIQUE = STAGES.index("critique") + 1


@dataclass(frozen=True)
class StageItem:
    task: TaskRef
    question: str
    text: str
    shown: tuple[str, ...] = ()  # stage 2 only: the answer values the critique judged, in the order shown


@dataclass(frozen=True)
class StageRecord:
    peer_id: str
    round: int
    stage: int  # 1 answer, 2 critique, 3 revise
    items: tuple[StageItem, ...]


def encode_stage_record(record: StageRecord) -> bytes:
    """Serialize ``record``; raise ValueError if it breaks any limit (callers trim before encoding)."""
    payload = {
        "v": SCHEMA_VERSION,
        "peer": record.peer_id,
        "round": record.round,
        "stage": record.stage,
        "items": [
            {
                "task": [i.task.family, i.task.config_id, i.task.seed, i.task.index],
                "q": i.question,
                "text": i.text,
                "shown": list(i.shown),
            }
            for i in record.items
        ],
    }
    try:
        _validate(payload)
    except RecordRejected as e:
        raise ValueError(f"stage record would be rejected by peers: {e.reason}") from e
    raw = msgpack.packb(payload, use_bin_type=True)
    if len(raw) > MAX_STAGE_RECORD_BYTES:
        raise ValueError(f"stage record is {len(raw)} bytes, more than {MAX_STAGE_RECORD_BYTES}")
    return raw


def decode_stage_record(raw: bytes) -> StageRecord:
    """Parse and validate a peer's stage record; raises only :class:`RecordRejected`."""
    if not isinstance(raw, bytes):
        raise RecordRejected("malformed")
    if len(raw) > MAX_STAGE_RECORD_BYTES:
        raise RecordRejected("oversized")
    try:
        payload = msgpack.unpackb(
            raw, raw=False, strict_map_key=True, max_str_len=MAX_STAGE_RECORD_BYTES, max_bin_len=0,
            max_array_len=4 * MAX_ITEMS, max_map_len=8, max_ext_len=0,
        )
    except (ValueError, msgpack.UnpackException, RecursionError) as e:
        raise RecordRejected("malformed") from e
    return _validate(payload)


def _validate(payload: Any) -> StageRecord:
    if not isinstance(payload, dict):
        raise RecordRejected("malformed")
    if "v" in payload:
        if _require_type(payload["v"], int) != SCHEMA_VERSION:
            raise RecordRejected("wrong_version")
    if payload.keys() != _RECORD_KEYS:
        raise RecordRejected("malformed")
    peer_id = _require_type(payload["peer"], str)
    if not 0 < len(peer_id) <= MAX_PEER_ID_CHARS:
        raise RecordRejected("malformed")
    round_ = _require_int(payload["round"], "malformed")
    stage = _require_int(payload["stage"], "bad_stage")
    if not 1 <= stage <= len(STAGES):
        raise RecordRejected("bad_stage")
    items = _require_type(payload["items"], list)
    if len(items) > MAX_ITEMS:
        raise RecordRejected("too_many_groups")
    return StageRecord(peer_id, round_, stage, tuple(_validate_item(item, stage) for item in items))


def _validate_item(item: Any, stage: int) -> StageItem:
    item = _require_type(item, dict)
    if item.keys() != _ITEM_KEYS:
        raise RecordRejected("malformed")
    task = _validate_task(item["task"])
    question, text = _require_type(item["q"], str), _require_type(item["text"], str)
    if len(question) > MAX_QUESTION_CHARS or len(text) > MAX_TEXT_CHARS:
        raise RecordRejected("text_too_long")
    shown = _require_type(item["shown"], list)
    if (stage == _CRITIQUE) != bool(shown) or len(shown) > MAX_SHOWN:
        raise RecordRejected("bad_shown")
    for value in shown:
        if len(_require_type(value, str)) > MAX_SHOWN_CHARS:
            raise RecordRejected("text_too_long")
    return StageItem(task=task, question=question, text=text, shown=tuple(shown))
