"""Publishing to the Hub, against a real loopback Hub server (tests/hubserver.py) and huggingface_hub itself."""

from __future__ import annotations

import hashlib
import io
import threading

import pytest
import torch
from PIL import Image
from transformers import AutoModelForCausalLM, AutoTokenizer

from node.config import NodeConfig
from node.errors import NodeError
from node.events import RoundFinished, UploadFailed, UploadFinished, UploadProgress, event_from_json
from node.hub import auth as hub_auth, upload as hub_upload
from node.learning.checkpoint import Checkpointer, CheckpointState
from node.runstore import RunStore
from node.swarm.identity import load_or_create
from tests.hubserver import HubServer, Token

WRITE, READ, SCOPED = "hf_write_token", "hf_read_token", "hf_scoped_token"


@pytest.fixture(autouse=True)
def online(monkeypatch):
    """conftest makes the Hub client offline; these tests talk to the loopback Hub only."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def hub(tmp_path):
    tokens = {WRITE: Token("alice", "write"), READ: Token("alice", "read", name="reader"),
              SCOPED: Token("alice", "fineGrained", scoped_write=("alice",))}
    with HubServer(tmp_path / "hub", tokens) as server:
        yield server


def metrics(round_: int, reward: float, peers: int = 2) -> RoundFinished:
    return RoundFinished(
        round=round_, rounds_trained=round_ + 1, reward_local=reward, reward_external=None, reward_train=reward,
        loss=0.1, kl=None, completion_length=12.0, tokens_generated=96, generation_tokens_per_s=40.0,
        seconds_generate=2.0, seconds_share=0.1, seconds_gather=0.2, seconds_train=1.0, seconds_total=3.3,
        peers_seen=peers, groups_shared=2, groups_received=4, groups_used=2, groups_zero_advantage=0,
        groups_rejected=0, rejected_reasons={},
    )


def make_run(tmp_path, model_dir, *, rounds: int = 12, upload: dict | None = None) -> NodeConfig:
    """A run folder as the node leaves it: identity, metrics and a checkpoint of the trained model."""
    config = NodeConfig.build({
        "training": {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "local_questions": 3, "external_groups": 5,
                     "num_generations": 6, "loss_type": "dr_grpo", "beta": 0.0},
        "tasks": {"weights": {"basic_arithmetic": 1.0, "bf": 2.0, "arc_1d": 0.0}},
        "run": {"data_dir": str(tmp_path / "data"), "run_name": "r1"},
        "upload": upload or {},
    })
    load_or_create(config.identity_path)
    store = RunStore(config.run_dir)
    for round_ in range(rounds):
        store.append_round(metrics(round_, reward=round_ / rounds, peers=1 + round_ % 4), [])
    checkpoint(config, model_dir, round_=rounds - 1)
    return config


def checkpoint(config: NodeConfig, model_dir, *, round_: int, nudge: float = 0.0):
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if nudge:
        with torch.no_grad():
            model.lm_head.weight.add_(nudge)  # a training step, as far as the files are concerned
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    optimizer = torch.optim.AdamW(model.parameters())
    state = CheckpointState(round=round_, rounds_trained=round_ + 1, global_step=round_ + 1,
                            model=config.training.model)
    return Checkpointer(config.run_dir / "checkpoints").save(model, tokenizer, optimizer, state)


def peer(config: NodeConfig) -> str:
    return load_or_create(config.identity_path).name


# -------------------------------------------------------------------------------------------------- tokens
def test_write_token_is_validated_with_account_name(hub):
    account = hub_auth.validate_token(WRITE, hub.url)
    assert (account.name, account.role, account.can_write) == ("alice", "write", True)
    scoped = hub_auth.validate_token(SCOPED, hub.url)
    assert scoped.can_write and scoped.can_write_to("alice/x") and not scoped.can_write_to("bob/x")
    with pytest.raises(NodeError) as err:
        hub_auth.require_write(scoped, "bob/x")
    assert err.value.code == "hub_read_only" and "no write access there" in err.value.message


def test_read_only_token_is_refused_with_a_clear_message(hub, tmp_path, tiny_model_dir):
    account = hub_auth.validate_token(READ, hub.url)
    assert account.name == "alice" and not account.can_write
    config = make_run(tmp_path, tiny_model_dir, rounds=2)
    with pytest.raises(NodeError) as err:
        hub_upload.upload_run(config, token=READ, endpoint=hub.url)
    assert err.value.code == "hub_read_only"
    assert "cannot write" in err.value.message and "read-only" in err.value.message
    assert "write access" in err.value.hint
    assert hub.repos == {}  # nothing was created


def test_invalid_token_and_unreachable_hub_give_clear_errors(hub):
    with pytest.raises(NodeError) as err:
        hub_auth.validate_token("hf_wrong", hub.url)
    assert err.value.code == "hub_unauthorized" and "rejected" in err.value.message
    with pytest.raises(NodeError) as err:
        hub_auth.validate_token(WRITE, "http://127.0.0.1:9")  # nothing listens on the discard port
    assert err.value.code == "hub_unreachable" and "cannot be reached" in err.value.message


# -------------------------------------------------------------------------------------------------- upload
def test_full_upload_then_model_loads_back_with_transformers(hub, tmp_path, tiny_model_dir):
    from huggingface_hub import snapshot_download

    config = make_run(tmp_path, tiny_model_dir)
    seen: list[tuple[int, int]] = []
    result = hub_upload.upload_run(config, token=WRITE, endpoint=hub.url, progress=lambda d, t: seen.append((d, t)))

    repo_id = f"alice/SmolLM2-135M-Instruct-swarm-{peer(config)}"
    assert result.repo_id == repo_id and result.created_repo and result.private is True
    assert hub.repos[repo_id].private
    files = set(hub.resolve(repo_id, "main")[1])
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "README.md", "reward_curve.png"} <= files
    assert not any("optimizer" in f or "state.json" in f for f in files)
    assert set(result.uploaded) == files - {".gitattributes"}
    # Progress: bytes, monotone within the upload, ending at the total.
    assert seen[-1] == (result.bytes_total, result.bytes_total) and result.bytes_total > 10**6
    assert result.bytes_sent >= hub.lfs_bytes_received[_sha256(tmp_path, config, "model.safetensors")]

    local = snapshot_download(repo_id, endpoint=hub.url, token=WRITE, local_dir=tmp_path / "download")
    model = AutoModelForCausalLM.from_pretrained(local)
    original = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    for a, b in zip(model.parameters(), original.parameters(), strict=True):
        assert torch.equal(a, b)
    tokenizer = AutoTokenizer.from_pretrained(local)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "2+2?"}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids["input_ids"].shape[1] + 4


def test_second_upload_sends_only_what_changed(hub, tmp_path, tiny_model_dir):
    config = make_run(tmp_path, tiny_model_dir)
    first = hub_upload.upload_run(config, token=WRITE, endpoint=hub.url)
    again = hub_upload.upload_run(config, token=WRITE, endpoint=hub.url)
    assert again.up_to_date and again.bytes_sent == 0 and len(hub.repos[first.repo_id].commits) == 2

    checkpoint(config, tiny_model_dir, round_=20, nudge=1e-3)  # more training: new weights, card and curve
    RunStore(config.run_dir).append_round(metrics(20, 0.9), [])
    received_before = sum(hub.lfs_bytes_received.values())
    third = hub_upload.upload_run(config, token=WRITE, endpoint=hub.url)
    assert set(third.uploaded) == {"model.safetensors", "README.md", "reward_curve.png"}
    assert "tokenizer.json" in third.unchanged and "config.json" in third.unchanged
    card = len(hub.read_file(third.repo_id, "README.md"))  # a regular file: it travels inside the commit
    assert sum(hub.lfs_bytes_received.values()) - received_before + card == third.bytes_sent


def test_interrupted_upload_leaves_repo_intact_and_resumes(hub, tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(hub_upload, "PROGRESS_INTERVAL_S", 0.0)  # loopback is fast: see every 64 KiB read
    config = make_run(tmp_path, tiny_model_dir)
    cancel = threading.Event()
    big = next((config.run_dir / "checkpoints").glob("round-*/model/model.safetensors")).stat().st_size

    def cut_mid_weights(done: int, total: int) -> None:
        if done > total - big // 2:  # the weights go last (largest): stop half-way through them
            cancel.set()

    repo_id = "alice/resume-test"
    with pytest.raises(hub_upload.UploadCancelled):
        hub_upload.upload_run(config, token=WRITE, endpoint=hub.url, repo_id=repo_id, progress=cut_mid_weights,
                              cancel=cancel)
    commits = hub.repos[repo_id].commits
    assert len(commits) == 1 and set(commits[0][1]) == {".gitattributes"}  # nothing half-published
    sent_before = dict(hub.lfs_bytes_received)
    assert sent_before  # the curve (LFS) made it before the cut

    result = hub_upload.upload_run(config, token=WRITE, endpoint=hub.url, repo_id=repo_id)
    assert len(hub.repos[repo_id].commits) == 2 and not result.created_repo
    assert "model.safetensors" in hub.repos[repo_id].commits[-1][1]
    for oid, received in sent_before.items():
        assert hub.lfs_bytes_received[oid] == received  # objects of the first attempt were not sent again
    assert hub.lfs_bytes_received[_sha256(tmp_path, config, "model.safetensors")] == big
    assert result.bytes_sent < result.bytes_total


def test_large_files_go_up_in_parts(hub, tmp_path, tiny_model_dir):
    hub.multipart_chunk = 4 * 2**20  # the Hub's multipart transfer, for the ~13 MB weights
    config = make_run(tmp_path, tiny_model_dir, rounds=2)
    result = hub_upload.upload_run(config, token=WRITE, endpoint=hub.url, repo_id="alice/parts")
    weights = next((config.run_dir / "checkpoints").glob("round-*/model/model.safetensors")).read_bytes()
    assert hub.read_file("alice/parts", "model.safetensors") == weights
    assert ("PUT", f"/_lfs/{_sha256(tmp_path, config, 'model.safetensors')}/part/4") in hub.requests
    assert result.bytes_sent == result.bytes_total


def test_model_card_describes_the_run(hub, tmp_path, tiny_model_dir):
    config = make_run(tmp_path, tiny_model_dir, rounds=12)
    result = hub_upload.upload_run(config, token=WRITE, endpoint=hub.url, repo_id="alice/card", private=False)
    assert result.private is False and not hub.repos["alice/card"].private
    card = hub.read_file("alice/card", "README.md").decode()
    header = card.split("---")[1]
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in header
    for tag in ("rl-swarm", "grpo", "sapo", "reasoning-gym"):
        assert f"- {tag}\n" in header
    assert "library_name: transformers" in header
    for expected in ("| rounds trained | 12 (last swarm round 11) |", "| most peers seen in a round | 4 |",
                     "| local questions per round (I) | 3 |", "| peer groups per round (J) | 5 |",
                     "| peer groups chosen | uniformly (SAPO) |",
                     "| completions per question (G) | 6 |", "dr_grpo, beta (KL) 0", "clip epsilon 0.2 / 0.28",
                     "| task families (reasoning-gym) | basic_arithmetic, bf |", "![reward per round](reward_curve.png)",
                     'AutoModelForCausalLM.from_pretrained("alice/card")', peer(config)):
        assert expected in card, expected
    image = Image.open(io.BytesIO(hub.read_file("alice/card", "reward_curve.png")))
    assert image.format == "PNG" and image.size == (800, 400)
    assert len(set(image.get_flattened_data())) > 3  # a drawn chart, not a blank image


def test_quota_and_missing_checkpoint_are_clear(hub, tmp_path, tiny_model_dir):
    empty = NodeConfig.build({"run": {"data_dir": str(tmp_path / "none")}})
    with pytest.raises(NodeError) as err:
        hub_upload.upload_run(empty, token=WRITE, endpoint=hub.url)
    assert err.value.code == "no_checkpoint"

    config = make_run(tmp_path, tiny_model_dir, rounds=2)
    hub.quota_bytes = 1000
    with pytest.raises(NodeError) as err:
        hub_upload.upload_run(config, token=WRITE, endpoint=hub.url, repo_id="alice/full")
    assert err.value.code == "hub_quota" and "quota" in err.value.message
    assert len(hub.repos["alice/full"].commits) == 1


def test_damaged_checkpoint_is_a_clear_error(hub, tmp_path, tiny_model_dir):
    config = make_run(tmp_path, tiny_model_dir, rounds=2)
    next((config.run_dir / "checkpoints").glob("round-*/model/model.safetensors")).unlink()
    with pytest.raises(NodeError) as err:
        hub_upload.upload_run(config, token=WRITE, endpoint=hub.url)
    assert err.value.code == "bad_checkpoint" and "no safetensors" in err.value.message
    assert hub.repos == {}


def test_upload_events_roundtrip_through_json_lines():
    for event in (UploadProgress(repo_id="a/b", bytes_done=5, bytes_total=9),
                  UploadFinished(repo_id="a/b", url="http://h/a/b", commit=None, round=3, files_uploaded=0,
                                 bytes_sent=0),
                  UploadFailed(repo_id="", message="m", hint="h", code="hub_unreachable")):
        assert event_from_json(event.to_json()) == event


def test_default_repo_id():
    assert hub_upload.default_repo_id("bob", "Qwen/Qwen2.5-0.5B-Instruct", "swift-amber-otter") == \
        "bob/Qwen2.5-0.5B-Instruct-swarm-swift-amber-otter"
    assert hub_upload.default_repo_id("bob", "bundled", "a-b-c") == "bob/SmolLM2-135M-Instruct-swarm-a-b-c"
    assert hub_upload.default_repo_id("bob", "/models/my model.gguf", "x") == "bob/my-model-swarm-x"
    assert len(hub_upload.default_repo_id("bob", "o/" + "m" * 120, "x").split("/")[1]) <= 96


def _sha256(tmp_path, config, name) -> str:
    path = next((config.run_dir / "checkpoints").glob(f"round-*/model/{name}"))
    return hashlib.sha256(path.read_bytes()).hexdigest()
