import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.swarm.records import (
    MAX_POINTER_BYTES,
    MAX_ROUND,
    GroupRecord,
    Pointer,
    admission_key,
    decode_group_record,
    decode_pointer,
    encode_group_record,
    encode_pointer,
    validate_round,
    MAX_COMPLETION_CHARS,
    MAX_COMPLETIONS,
    MAX_FAMILY_CHARS,
    MAX_GROUPS,
    MAX_QUESTION_CHARS,
    MAX_RECORD_BYTES,
    SCHEMA_VERSION,
    RecordRejected,
    RoundRecord,
    SharedGroup,
    decode_record,
    encode_record,
)
from node.tasks.taskref import TaskRef

PEER = "QmYjJJ1v2eDWAM7tAPZLsq7qRREFC1otNFPcWHYwbY47bR"


def group(**overrides):
    completions = overrides.get("c", ["5", "<answer>5</answer>"])
    fields = {
        "task": ["basic_arithmetic", "3fa2c1", 7, 12],
        "q": "What is 2 + 3?",
        "c": completions,
        "f": [True] * len(completions) if isinstance(completions, list) else [],
    }
    return {**fields, **overrides}


def payload(**overrides):
    fields = {"v": SCHEMA_VERSION, "peer": PEER, "round": 4, "groups": [group()]}
    return {**fields, **overrides}


def pack(obj):
    return msgpack.packb(obj, use_bin_type=True)


def reason(raw):
    with pytest.raises(RecordRejected) as info:
        decode_record(raw)
    return info.value.reason


def test_roundtrip():
    record = RoundRecord(
        peer_id=PEER,
        round=3,
        groups=(
            SharedGroup(
                TaskRef("arc_1d", "deadbeef", 1, 0),
                "Q1 \u00e9\u4e2d\U0001f600",
                ("a", "", "c" * 1000),
                (True, False, True),
            ),
            SharedGroup(TaskRef("leg_counting", "0a", 2**63 - 1, 5), "Q2", ("x",), (False,)),
        ),
    )
    raw = encode_record(record)
    assert decode_record(raw) == record
    assert msgpack.unpackb(raw) == {
        "v": 2,
        "peer": PEER,
        "round": 3,
        "groups": [
            {
                "task": ["arc_1d", "deadbeef", 1, 0],
                "q": "Q1 \u00e9\u4e2d\U0001f600",
                "c": ["a", "", "c" * 1000],
                "f": [True, False, True],
            },
            {"task": ["leg_counting", "0a", 2**63 - 1, 5], "q": "Q2", "c": ["x"], "f": [False]},
        ],
    }


def test_a_crafted_valid_payload_decodes():
    record = decode_record(pack(payload()))
    assert record.groups[0].task == TaskRef("basic_arithmetic", "3fa2c1", 7, 12)
    assert record.groups[0].completions == ("5", "<answer>5</answer>")


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"x" * (MAX_RECORD_BYTES + 1), "oversized"),
        (b"", "malformed"),
        (b"\xc1", "malformed"),  # never-used msgpack byte
        (pack(payload())[:-3], "malformed"),  # truncated
        (pack(payload()) + b"\x00", "malformed"),  # trailing data
        (pack([1, 2, 3]), "malformed"),
        (pack({**payload(), "extra": 1}), "malformed"),
        (pack({k: v for k, v in payload().items() if k != "groups"}), "malformed"),
        (pack({1: 2}), "malformed"),  # non-string map key
        (pack(payload(groups=[{**group(), "answer": "5"}])), "malformed"),  # ground truth never travels
        (pack(payload(groups=[group(task=["basic_arithmetic", "3fa2c1", 7])])), "malformed"),
        (pack(payload(groups=[[1, 2]] * 100000)), "malformed"),  # array beyond any limit
        (pack(payload(peer="")), "malformed"),
        (pack(payload(round=-1)), "round_out_of_range"),
        (pack(payload(round=MAX_ROUND + 1)), "round_out_of_range"),
        (pack(payload(round=2**63 - 1)), "round_out_of_range"),
        (pack(payload(round=2**64 - 1)), "round_out_of_range"),
        (pack({**payload(), "v": 1}), "wrong_version"),
        (msgpack.packb(payload(peer=msgpack.ExtType(5, b"x"))), "malformed"),
        (pack(payload(peer=b"bytes")), "wrong_type"),
        (pack(payload(round=1.0)), "wrong_type"),
        (pack(payload(round=True)), "wrong_type"),
        (pack(payload(groups={"a": 1})), "wrong_type"),
        (pack(payload(groups=[1])), "wrong_type"),
        (pack(payload(groups=[group(q=None)])), "wrong_type"),
        (pack(payload(groups=[group(c="5")])), "wrong_type"),
        (pack(payload(groups=[group(c=["5", 5])])), "wrong_type"),
        (pack(payload(groups=[group(f=None)])), "wrong_type"),
        (pack(payload(groups=[group(f=[True, 1])])), "wrong_type"),
        (pack(payload(groups=[group(f=[True])])), "malformed"),  # one flag per completion
        (pack(payload(groups=[{k: v for k, v in group().items() if k != "f"}])), "malformed"),
        (pack(payload(groups=[group(task=["basic_arithmetic", "3fa2c1", "7", 12])])), "wrong_type"),
        (pack(payload(v="1")), "wrong_type"),
        (pack(payload(v=3)), "wrong_version"),
        (pack({"v": 3, "something": "else"}), "wrong_version"),
        (pack(payload(groups=[group()] * (MAX_GROUPS + 1))), "too_many_groups"),
        (pack(payload(groups=[group(c=["x"] * (MAX_COMPLETIONS + 1))])), "too_many_completions"),
        (pack(payload(groups=[group(q="q" * (MAX_QUESTION_CHARS + 1))])), "text_too_long"),
        (pack(payload(groups=[group(c=["ok", "c" * (MAX_COMPLETION_CHARS + 1)])])), "text_too_long"),
        (pack(payload(groups=[group(task=["", "3fa2c1", 7, 12])])), "bad_task_ref"),
        (pack(payload(groups=[group(task=["f" * (MAX_FAMILY_CHARS + 1), "3fa2c1", 7, 12])])), "bad_task_ref"),
        (pack(payload(groups=[group(task=["bad family", "3fa2c1", 7, 12])])), "bad_task_ref"),
        (pack(payload(groups=[group(task=["basic_arithmetic", "xyz", 7, 12])])), "bad_task_ref"),
        (pack(payload(groups=[group(task=["basic_arithmetic", "", 7, 12])])), "bad_task_ref"),
        (pack(payload(groups=[group(task=["basic_arithmetic", "3fa2c1", -7, 12])])), "bad_task_ref"),
        (pack(payload(groups=[group(task=["basic_arithmetic", "3fa2c1", 7, -1])])), "bad_task_ref"),
        (pack(payload(groups=[group(task=["basic_arithmetic", "3fa2c1", 7, 2**64 - 1])])), "bad_task_ref"),
        (pack(payload(groups=[group(c=[])])), "empty_group"),
    ],
)
def test_rejection_reasons(raw, expected):
    assert reason(raw) == expected


def test_every_field_at_its_limit_is_accepted():
    big = payload(
        groups=[group(q="q" * MAX_QUESTION_CHARS, c=["c" * 100] * MAX_COMPLETIONS)]
        + [group(task=["f" * MAX_FAMILY_CHARS, "0" * 64, 2**63 - 1, 2**63 - 1])] * (MAX_GROUPS - 1)
    )
    assert len(decode_record(pack(big)).groups) == MAX_GROUPS


def test_encode_refuses_what_peers_would_reject():
    too_many = MAX_COMPLETIONS + 1
    with pytest.raises(ValueError, match="too_many_completions"):
        crowded = SharedGroup(TaskRef("a", "0", 0, 0), "q", ("c",) * too_many, (True,) * too_many)
        encode_record(RoundRecord(PEER, 1, (crowded,)))
    with pytest.raises(ValueError, match="bad_task_ref"):
        encode_record(RoundRecord(PEER, 1, (SharedGroup(TaskRef("a", "0", -1, 0), "q", ("c",), (True,)),)))
    groups = tuple(
        SharedGroup(TaskRef("a", "0", 0, i), "q" * MAX_QUESTION_CHARS, ("c" * MAX_COMPLETION_CHARS,) * 2, (True,) * 2)
        for i in range(MAX_GROUPS)
    )  # every text within its cap, but far above MAX_RECORD_BYTES in total
    with pytest.raises(ValueError, match="MAX_RECORD_BYTES"):
        encode_record(RoundRecord(PEER, 1, groups))


def rejects_only_with_record_rejected(raw):
    try:
        record = decode_record(raw)
    except RecordRejected as e:
        assert e.reason and e.reason.replace("_", "").isalpha() and e.reason.islower()
    else:
        assert isinstance(record, RoundRecord)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4096))
def test_arbitrary_bytes_only_raise_record_rejected(raw):
    rejects_only_with_record_rejected(raw)


@settings(max_examples=200)
@given(st.binary(min_size=1, max_size=64), st.integers(min_value=0, max_value=200))
def test_mutated_valid_records_only_raise_record_rejected(noise, offset):
    raw = bytearray(pack(payload(groups=[group(), group(c=["a" * 30, "b"])])))
    position = offset % len(raw)
    raw[position : position + len(noise)] = noise
    rejects_only_with_record_rejected(bytes(raw))


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.binary(max_size=20),
)
anything = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(st.one_of(st.text(max_size=5), st.integers(-5, 5)), children)
    ),
    max_leaves=20,
)
near_task = st.one_of(
    st.tuples(st.text(max_size=8), st.text(alphabet="0123456789abcdefXYZ", max_size=8), anything, anything).map(list),
    st.lists(anything, max_size=5),
    anything,
)
near_group = st.one_of(
    st.fixed_dictionaries(
        {
            "task": near_task,
            "q": st.one_of(st.text(max_size=20), anything),
            "c": st.lists(st.one_of(st.text(max_size=5), anything), max_size=4),
            "f": st.lists(st.one_of(st.booleans(), anything), max_size=4),
        },
        optional={"extra": anything},
    ),
    anything,
)
near_payload = st.fixed_dictionaries(
    {
        "v": st.one_of(st.just(SCHEMA_VERSION), anything),
        "peer": st.one_of(st.just(PEER), anything),
        "round": st.one_of(st.integers(min_value=-5, max_value=2**64 - 1), anything),
        "groups": st.one_of(st.lists(near_group, max_size=4), anything),
    },
    optional={"extra": anything},
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(near_payload)
def test_structures_near_the_valid_shape_only_raise_record_rejected(obj):
    rejects_only_with_record_rejected(pack(obj))


task_refs = st.builds(
    TaskRef,
    family=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=MAX_FAMILY_CHARS),
    config_id=st.text(alphabet="0123456789abcdef", min_size=1, max_size=16),
    seed=st.integers(min_value=0, max_value=2**63 - 1),
    index=st.integers(min_value=0, max_value=2**63 - 1),
)
groups = st.builds(
    lambda task, question, completions: SharedGroup(
        task, question, tuple(text for text, _ in completions), tuple(flag for _, flag in completions)
    ),
    task=task_refs,
    question=st.text(max_size=200),
    completions=st.lists(st.tuples(st.text(max_size=200), st.booleans()), min_size=1, max_size=8),
)
records = st.builds(
    RoundRecord,
    peer_id=st.text(alphabet="123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz", min_size=1, max_size=60),
    round=st.integers(min_value=0, max_value=MAX_ROUND),
    groups=st.lists(groups, max_size=6).map(tuple),
    prompt_format=st.integers(min_value=1, max_value=3),
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(records)
def test_encode_decode_roundtrip(record):
    assert decode_record(encode_record(record)) == record


def test_every_round_the_bound_allows_is_encodable_and_nothing_above():
    group = SharedGroup(TaskRef("arc_1d", "ab", 0, 0), "Q", ("a",), (True,))
    assert decode_record(encode_record(RoundRecord(PEER, MAX_ROUND, (group,)))).round == MAX_ROUND
    with pytest.raises(ValueError, match="round_out_of_range"):
        encode_record(RoundRecord(PEER, MAX_ROUND + 1, (group,)))
    assert validate_round(MAX_ROUND) == MAX_ROUND
    for bad in (-1, MAX_ROUND + 1, 2**63 - 1, True, 1.0, "5"):
        with pytest.raises(ValueError):
            validate_round(bad)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(records.filter(lambda r: r.groups), st.booleans())
def test_group_records_roundtrip_with_and_without_admission(record, private):
    key = admission_key("s3cret") if private else None
    for index, group in enumerate(record.groups):
        one = GroupRecord(record.peer_id, record.round, index, group, record.prompt_format)
        assert decode_group_record(encode_group_record(one, admission_key=key), admission_key=key) == one
        assert one.as_round_record().groups == (group,)


def test_admission_tag_keeps_outsiders_out():
    one = GroupRecord(PEER, 7, 0, SharedGroup(TaskRef("arc_1d", "ab", 0, 0), "Q", ("a",), (True,)))
    key = admission_key("the swarm secret")
    for raw in (encode_group_record(one), encode_group_record(one, admission_key=admission_key("guess"))):
        with pytest.raises(RecordRejected) as info:
            decode_group_record(raw, admission_key=key)
        assert info.value.reason == "not_admitted"
    tampered = msgpack.unpackb(encode_group_record(one, admission_key=key))
    tampered["g"]["c"] = ["a payload"]  # a member's tag does not cover someone else's text
    with pytest.raises(RecordRejected) as info:
        decode_group_record(pack(tampered), admission_key=key)
    assert info.value.reason == "not_admitted"


def test_pointers_roundtrip_and_refuse_bad_shapes():
    pointer = Pointer(PEER, 9, 8, (0, 3, 7))
    assert decode_pointer(encode_pointer(pointer)) == pointer
    base = {"v": 2, "peer": PEER, "round": 9, "n": 8, "s": [1]}
    for bad, why in (
        ({**base, "n": 0}, "too_many_groups"),
        ({**base, "n": MAX_GROUPS + 1}, "too_many_groups"),
        ({**base, "s": [8]}, "malformed"),
        ({**base, "s": [True]}, "malformed"),
        ({**base, "round": MAX_ROUND + 1}, "round_out_of_range"),
        ({**base, "x": 1}, "malformed"),
    ):
        with pytest.raises(RecordRejected) as info:
            decode_pointer(pack(bad))
        assert info.value.reason == why
    with pytest.raises(RecordRejected):
        decode_pointer(b"x" * (MAX_POINTER_BYTES + 1))
