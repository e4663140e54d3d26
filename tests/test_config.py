"""One typed configuration: defaults, TOML files, CLI overrides and actionable validation errors."""

from __future__ import annotations

import pytest

from node.cli import _parser, config_from_args
from node.config import NodeConfig
from node.curriculum import default_mix
from node.errors import NodeError
from node.taskref import DEFAULT_FAMILIES


def test_defaults_are_valid_and_sapo_shaped():
    config = NodeConfig.build()
    assert config.training.model == "bundled"
    assert config.tasks.weights == {}  # chosen for the model's size when the node starts
    assert set(default_mix(500_000_000).weights) == set(DEFAULT_FAMILIES)  # hub models: the nine SAPO families
    small = default_mix(135_000_000)
    assert set(small.weights) == set(small.ladders) and "basic_arithmetic" in small.weights
    assert config.training.beta == 0.0 and (config.training.epsilon, config.training.epsilon_high) == (0.2, 0.28)


def test_toml_roundtrip_and_overrides(tmp_path):
    path = tmp_path / "node.toml"
    path.write_text('[training]\nnum_generations = 8\nexternal_groups = 0\n[swarm]\nswarm_name = "lab"\n')
    config = NodeConfig.load(path, {"training": {"local_questions": 3, "num_generations": None}})
    assert (config.training.num_generations, config.training.local_questions) == (8, 3)
    assert config.training.external_groups == 0 and config.swarm.swarm_name == "lab"
    config.save(tmp_path / "saved.toml")
    assert NodeConfig.load(tmp_path / "saved.toml") == config


@pytest.mark.parametrize(
    "data, fragment",
    [
        ({"training": {"num_generations": 1}}, "[training] num_generations"),
        ({"training": {"epsilon": 0.3, "epsilon_high": 0.2}}, "epsilon_high"),
        ({"training": {"device": "tpu"}}, "[training] device"),
        ({"swarm": {"port": 70000}}, "[swarm] port"),
        ({"run": {"turbo": True}}, "[run] turbo: unknown setting"),
        ({"swarm": {"swarm_name": "no spaces allowed"}}, "[swarm] swarm_name"),
    ],
)
def test_invalid_settings_name_the_field_and_how_to_fix(data, fragment):
    with pytest.raises(NodeError) as info:
        NodeConfig.build(data)
    assert fragment in info.value.message
    assert "--help" in info.value.hint


def test_broken_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[training\n")
    with pytest.raises(NodeError, match="not valid TOML"):
        NodeConfig.load(bad)
    with pytest.raises(NodeError, match="does not exist"):
        NodeConfig.load(tmp_path / "missing.toml")


def test_cli_flags_map_onto_the_same_config(tmp_path):
    args = _parser().parse_args(
        ["run", "-I", "3", "-J", "0", "-G", "6", "--join", "/ip4/127.0.0.1/tcp/1/p2p/QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N", "--data-dir", str(tmp_path),
         "--families", "basic_arithmetic,bf", "--rounds", "2", "--threads", "1"]
    )
    config = config_from_args(args)
    assert (config.training.local_questions, config.training.external_groups, config.training.num_generations) == (3, 0, 6)
    assert config.swarm.initial_peers == ["/ip4/127.0.0.1/tcp/1/p2p/QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"]
    assert config.tasks.weights == {"basic_arithmetic": 1.0, "bf": 1.0}
    assert config.run.data_dir == tmp_path and config.run.rounds == 2
    assert config.run_dir == tmp_path / "runs" / "default"


def test_with_values_sets_none_where_with_overrides_keeps(tmp_path):
    config = NodeConfig.build({"run": {"data_dir": str(tmp_path), "threads": 3}, "upload": {"repo_id": "a/b"}})
    assert config.with_overrides({"run": {"threads": None}}).run.threads == 3  # a flag not given
    cleared = config.with_values({"run": {"threads": None}, "upload": {"repo_id": None, "every_rounds": 5}})
    assert cleared.run.threads is None and cleared.upload.repo_id is None and cleared.upload.every_rounds == 5
    assert cleared.run.data_dir == config.run.data_dir and cleared.training == config.training
    with pytest.raises(NodeError):
        config.with_values({"run": {"threads": 0}})
