"""Automatic upload from a real in-process node (tiny model): it publishes beside training, and a Hub that cannot
be reached gives clear upload_failed events while training goes on to the end."""

from __future__ import annotations

import pytest

from node.events import EventBus
from node.hub import auth as hub_auth
from node.runner import SwarmNode
from tests.hubserver import HubServer, Token
from tests.nodes import tiny_config
from tests.test_hub_upload import online  # noqa: F401 - fixture

pytestmark = pytest.mark.slow
TOKEN = "hf_auto_write"


def run_node(tmp_path, tiny_model_dir, monkeypatch, *, endpoint: str, rounds: int, every: int) -> list:
    monkeypatch.setenv(hub_auth.PASSPHRASE_ENV, "node passphrase")
    config = tiny_config(tiny_model_dir, tmp_path / "data", run={"rounds": rounds, "checkpoint_every_rounds": every})
    config = config.update({"upload": {"every_rounds": every, "endpoint": endpoint, "repo_id": "alice/auto"}})
    hub_auth.token_store(config.run.data_dir).set(hub_auth.TOKEN_SECRET, TOKEN)
    bus, events = EventBus(), []
    bus.subscribe(events.append)
    SwarmNode(config, bus=bus).run()
    return events


def test_node_uploads_every_n_rounds_in_the_background(tmp_path, tiny_model_dir, monkeypatch):
    with HubServer(tmp_path / "hub", {TOKEN: Token("alice", "write")}) as hub:
        events = run_node(tmp_path, tiny_model_dir, monkeypatch, endpoint=hub.url, rounds=4, every=2)
        kinds = [e.kind for e in events]
        assert kinds.count("round_finished") == 4 and "upload_failed" not in kinds, kinds
        finished = [e for e in events if e.kind == "upload_finished"]
        assert finished and all(e.repo_id == "alice/auto" and e.commit for e in finished)
        progress = [e for e in events if e.kind == "upload_progress"]
        assert progress and progress[-1].bytes_done == progress[-1].bytes_total > 0
        commits = hub.repos["alice/auto"].commits
        assert len(commits) == 1 + len(finished)  # the initial commit, then one per upload
        assert {"model.safetensors", "README.md", "reward_curve.png"} <= set(commits[-1][1])
        assert events[-1].kind == "state_changed" and events[-1].state == "stopped"


def test_unreachable_hub_fails_uploads_clearly_and_training_goes_on(tmp_path, tiny_model_dir, monkeypatch):
    events = run_node(tmp_path, tiny_model_dir, monkeypatch, endpoint="http://127.0.0.1:9", rounds=3, every=1)
    kinds = [e.kind for e in events]
    assert kinds.count("round_finished") == 3, kinds
    failures = [e for e in events if e.kind == "upload_failed"]
    assert failures and all(f.code == "hub_unreachable" for f in failures)
    assert "cannot be reached" in failures[0].message and "training goes on" in failures[0].hint
    assert "error" not in kinds and events[-1].state == "stopped"
