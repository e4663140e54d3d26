"""Stage records on the wire, and the game setting carried by invites and the command line."""

from __future__ import annotations

import msgpack
import pytest

from node.cli.main import _parser, config_from_args
from node.errors import NodeError
from node.game.exchange import InMemoryGameHub
from node.game.records import (
    MAX_STAGE_RECORD_BYTES, MAX_TEXT_CHARS, StageItem, StageRecord, decode_stage_record, encode_stage_record,
)
from node.swarm.invite import format_invite, parse_invite
from node.swarm.records import RecordRejected, RoundRecord, encode_record
from node.tasks.taskref import TaskRef

REF = TaskRef("chain_sum", "fbef8694bfd2", 5, 17)
PEER = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"
ADDR = f"/ip4/192.168.1.7/tcp/31337/p2p/{PEER}"


def record(stage=2, **item):
    fields = {"task": REF, "question": "1 + 2 =", "text": "<correct>A</correct><why>3</why>",
              "shown": ("3", "") if stage == 2 else ()}
    fields.update(item)
    return StageRecord(PEER, 4, stage, (StageItem(**fields),))


def payload(**changes):
    base = {"v": 1, "peer": PEER, "round": 4, "stage": 1,
            "items": [{"task": ["chain_sum", "fbef8694bfd2", 5, 17], "q": "1 + 2 =", "text": "<answer>3</answer>", "shown": []}]}
    base.update(changes)
    return msgpack.packb(base, use_bin_type=True)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_stage_records_round_trip(stage):
    original = record(stage)
    assert decode_stage_record(encode_stage_record(original)) == original


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xc1garbage", "malformed"),
        (b"x" * (MAX_STAGE_RECORD_BYTES + 1), "oversized"),
        (payload(v=2), "wrong_version"),
        (payload(stage=0), "bad_stage"),
        (payload(stage=4), "bad_stage"),
        (payload(stage=True), "wrong_type"),
        (payload(answer="3"), "malformed"),  # ground truth has no place in a record
        (payload(items=[{"task": ["chain_sum", "fbef8694bfd2", 5, 17], "q": "q", "text": "t", "shown": ["3"]}]), "bad_shown"),
        (payload(stage=2, items=[{"task": ["chain_sum", "fbef8694bfd2", 5, 17], "q": "q", "text": "t", "shown": []}]), "bad_shown"),
        (payload(stage=2, items=[{"task": ["chain_sum", "fbef8694bfd2", 5, 17], "q": "q", "text": "t", "shown": ["1"] * 9}]), "bad_shown"),
        (payload(stage=2, items=[{"task": ["chain_sum", "fbef8694bfd2", 5, 17], "q": "q", "text": "t", "shown": ["9" * 65]}]), "text_too_long"),
        (payload(items=[{"task": ["chain_sum", "fbef8694bfd2", 5, 17], "q": "q", "text": "t" * (MAX_TEXT_CHARS + 1), "shown": []}]), "text_too_long"),
        (payload(items=[{"task": ["chain sum!", "fbef8694bfd2", 5, 17], "q": "q", "text": "t", "shown": []}]), "bad_task_ref"),
        (payload(items=[{"task": ["chain_sum", "fbef8694bfd2", 5, 17], "q": "q", "text": 3, "shown": []}]), "wrong_type"),
        (payload(items=[{"task": ["chain_sum", "fbef8694bfd2", 5, 17], "q": "q", "text": "t", "shown": []}] * 17), "too_many_groups"),
    ],
)
def test_hostile_stage_records_are_rejected_with_a_reason(raw, reason):
    with pytest.raises(RecordRejected) as e:
        decode_stage_record(raw)
    assert e.value.reason == reason


def test_what_we_publish_every_peer_accepts():
    with pytest.raises(ValueError):
        encode_stage_record(record(1, shown=("3",)))
    with pytest.raises(ValueError):
        encode_stage_record(record(3, text="x" * (MAX_TEXT_CHARS + 1)))


def test_a_round_record_is_not_a_stage_record():
    sapo = encode_record(RoundRecord(PEER, 4, ()))
    with pytest.raises(RecordRejected):
        decode_stage_record(sapo)


def test_the_exchange_only_returns_records_in_their_own_slot_by_their_own_author():
    hub = InMemoryGameHub()
    hub.store("someone", 4, 2, encode_stage_record(record(2)))  # claims to be PEER's
    hub.store(PEER, 4, 3, encode_stage_record(record(2)))  # a stage-2 record in the stage-3 slot
    hub.store(PEER, 4, 2, encode_stage_record(record(2)))
    mine = hub.exchange("me")
    assert mine.gather(4, 2).records == (record(2),)
    assert mine.gather(4, 2).rejected == {"peer_mismatch": 1}
    assert mine.gather(4, 3).rejected == {"round_mismatch": 1}
    assert hub.exchange(PEER).gather(4, 2).records == ()  # one's own record is not a peer's
    with pytest.raises(ValueError):
        mine.publish(record(2))  # nobody publishes under another's name


# ------------------------------------------------------------------------------------------------ the invite
def test_invites_carry_the_game():
    text = format_invite("team", [ADDR], "multistage")
    assert parse_invite(text).game == "multistage"
    assert parse_invite(format_invite("team", [ADDR])).game == "sapo"
    assert parse_invite(f"rl-swarm:join?swarm=team&peer={ADDR}").game == "sapo"  # from a SAPO-only version
    assert parse_invite(ADDR).game is None  # bare address: the joiner's own setting


def test_an_invite_to_an_unknown_game_is_refused_with_a_hint():
    with pytest.raises(NodeError) as e:
        parse_invite(f"rl-swarm:join?swarm=team&game=chess&peer={ADDR}")
    assert e.value.code == "bad_invite" and "update" in e.value.hint


def test_joining_with_an_invite_plays_its_game(tmp_path):
    invite = format_invite("team", [ADDR], "multistage")
    config = config_from_args(_parser().parse_args(["run", "--data-dir", str(tmp_path), "--join", invite]))
    assert config.swarm.game == "multistage" and config.swarm.swarm_name == "team"
    assert config_from_args(_parser().parse_args(["run", "--data-dir", str(tmp_path)])).swarm.game == "sapo"
    assert config_from_args(_parser().parse_args(["run", "--data-dir", str(tmp_path), "--game", "multistage"])).swarm.game == "multistage"
    with pytest.raises(NodeError):
        config_from_args(_parser().parse_args(["run", "--data-dir", str(tmp_path), "--join", invite, "--game", "sapo"]))
