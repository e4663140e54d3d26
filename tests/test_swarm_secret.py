"""A private swarm's admission secret lives in the secret store, per swarm: set by an invite or --private, read by
the runner, moved out of earlier versions' plaintext configs, never written in a config file or a log."""

from __future__ import annotations

import logging

import pytest

from node.cli.main import _parser, admit, config_from_args
from node.config import NodeConfig
from node.errors import NodeError
from node.logs import LOG_FILE
from node.runner import _dht_exchange
from node.secret_store import PASSPHRASE_ENV
from node.swarm import admission as swarm_secret
from node.swarm.identity import load_or_create
from node.swarm.invite import format_invite, parse_invite
from node.swarm.records import admission_key
from tests.nodes import NodeProcess, tiny_config
from tests.test_wallet import assert_no_plaintext

PEER = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"
ADDR = f"/ip4/192.168.1.7/tcp/31337/p2p/{PEER}"
SECRET = "kq3V+a/b=c&d?e%f-team-secret"  # characters a URL query must escape


def join(tmp_path, *invites: str, private: bool | None = None, swarm: str | None = None):
    flag = {None: [], True: ["--private"], False: ["--no-private"]}[private]
    args = _parser().parse_args(["run", "--data-dir", str(tmp_path), *flag,
                                 *(["--swarm-name", swarm] if swarm else []),
                                 *(arg for invite in invites for arg in ("--join", invite))])
    config = config_from_args(args)
    return config, admit(args, config)


def test_an_invite_carries_the_secret_and_joining_stores_it_in_the_store_only(tmp_path, unlocked, caplog):
    caplog.set_level(logging.DEBUG)
    invite = format_invite("Team", [ADDR], "sapo", SECRET)
    assert parse_invite(invite).admission_secret == SECRET and SECRET not in repr(parse_invite(invite))
    config, private = join(tmp_path, invite)
    assert private and config.swarm.swarm_name == "Team"
    assert swarm_secret.load(tmp_path, "Team") == SECRET and swarm_secret.load(tmp_path, "team") is None
    config.save(tmp_path / "config.toml")
    assert_no_plaintext(tmp_path, SECRET)
    assert SECRET not in caplog.text
    # the exchange the runner builds tags and checks records with the swarm's key
    identity = load_or_create(tmp_path / "swarm.key")
    assert _dht_exchange(config, identity, [])._admission == admission_key(SECRET)

    # an invite without a secret (copied from a member's window) leaves it; --no-private forgets it
    assert join(tmp_path, format_invite("Team", [ADDR]))[1] and join(tmp_path, ADDR, swarm="Team")[1]
    config, private = join(tmp_path, format_invite("Team", [ADDR]), private=False)
    assert not private and swarm_secret.load(tmp_path, "Team") is None
    assert _dht_exchange(config, identity, [])._admission is None


def test_private_makes_a_secret_once_and_the_invite_command_prints_it(tmp_path, unlocked):
    config, private = join(tmp_path, private=True)
    secret = swarm_secret.load(tmp_path, config.swarm.swarm_name)
    assert private and len(secret) >= 32
    assert join(tmp_path, private=True)[1] and swarm_secret.load(tmp_path, config.swarm.swarm_name) == secret


@pytest.mark.parametrize("secret", ["short", "with a space in it, long enough", "x" * 257])
def test_an_invite_with_a_bad_secret_is_refused(secret):
    with pytest.raises(NodeError) as e:
        parse_invite(format_invite("team", [ADDR], "sapo", secret))
    assert e.value.code == "bad_admission_secret" and e.value.hint


def test_an_invite_error_never_echoes_the_secret():
    with pytest.raises(NodeError) as e:
        parse_invite(f"rl-swarm:join?swarm=team&secret={SECRET}")
    assert e.value.code == "bad_invite" and "kq3V" not in str(e.value)


def test_a_locked_store_is_a_plain_error_that_says_how_to_unlock(tmp_path, monkeypatch):
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    with pytest.raises(NodeError) as e:
        join(tmp_path, format_invite("team", [ADDR], "sapo", SECRET))
    assert e.value.code == "locked" and "private swarm 'team'" in e.value.message and PASSPHRASE_ENV in e.value.hint
    assert swarm_secret.load(tmp_path, "team") is None  # nothing stored: still a public swarm for this folder


OLD_CONFIG = f"""# my node
[swarm]
swarm_name = "team"
admission_secret = "{SECRET}"  # from the invite
gather_timeout_s = 7.0

[run]
data_dir = "{{data_dir}}"
"""


def test_an_old_config_with_the_plaintext_secret_is_migrated_into_the_store(tmp_path, unlocked, caplog):
    path = tmp_path / "config.toml"
    path.write_text(OLD_CONFIG.format(data_dir=tmp_path), encoding="utf-8")
    config = NodeConfig.load(path, {"swarm": {"gather_timeout_s": 9.0}})
    assert config.swarm.swarm_name == "team" and config.swarm.gather_timeout_s == 9.0
    assert swarm_secret.load(tmp_path, "team") == SECRET
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# my node") and "gather_timeout_s = 7.0" in text  # only the secret's line went
    assert_no_plaintext(tmp_path, SECRET)
    assert SECRET not in caplog.text and "moved the admission secret" in caplog.text
    assert NodeConfig.load(path) == config.update({"swarm": {"gather_timeout_s": 7.0}})


def test_an_old_config_is_left_as_it_is_when_the_store_is_locked(tmp_path, monkeypatch):
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    path = tmp_path / "config.toml"
    path.write_text(OLD_CONFIG.format(data_dir=tmp_path), encoding="utf-8")
    with pytest.raises(NodeError) as e:
        NodeConfig.load(path)
    assert e.value.code == "locked" and PASSPHRASE_ENV in e.value.hint
    assert path.read_text(encoding="utf-8") == OLD_CONFIG.format(data_dir=tmp_path)


@pytest.mark.slow
def test_a_private_node_run_writes_its_secret_nowhere(tiny_model_dir, tmp_path, unlocked):
    swarm_secret.remember(tmp_path, "team", SECRET)
    config = tiny_config(tiny_model_dir, tmp_path, swarm={"swarm_name": "team"}, run={"rounds": 1},
                         evaluation={"every_rounds": 0})
    node = NodeProcess(config, name="private")
    try:
        node.wait_for(lambda e: e.kind == "round_finished")
        assert node.finish() == 0
    finally:
        node.kill_tree()
    assert (config.run_dir / "config.toml").exists() and (config.run_dir / LOG_FILE).exists()
    assert_no_plaintext(tmp_path, SECRET)  # run config, node log, events, the node's stderr
