"""One typed configuration: defaults, TOML files, CLI overrides and actionable validation errors."""

from __future__ import annotations

import pytest

from node.cli.main import FLAG_SECTIONS, _parser, config_flags, config_from_args, flag_name
from node.config import UNSET, NodeConfig
from node.errors import NodeError
from node.learning.models import CATALOG
from node.tasks.curriculum import SMALL_MODEL_DEFAULT_FAMILIES, default_mix
from node.tasks.taskref import DEFAULT_FAMILIES


def test_defaults_are_valid_and_sapo_shaped():
    config = NodeConfig.build()
    assert config.training.model == "bundled"
    assert config.tasks.weights == {}  # chosen for the model's size when the node starts
    # the SAPO experiments' model and larger: the nine SAPO families
    for spec in (CATALOG["Qwen/Qwen2.5-0.5B-Instruct"], CATALOG["Qwen/Qwen3-0.6B"]):
        assert set(default_mix(spec.params).weights) == set(DEFAULT_FAMILIES)
    assert set(default_mix(CATALOG["HuggingFaceTB/SmolLM2-360M-Instruct"].params).weights) != set(DEFAULT_FAMILIES)
    small = default_mix(135_000_000)
    # the bundled model's mix: families it learned in the learning bench, each with a ladder; never-solved ones out
    assert set(small.weights) == set(SMALL_MODEL_DEFAULT_FAMILIES) <= set(small.ladders)
    assert "basic_arithmetic" in small.weights and "gcd" not in small.weights and "gcd" in small.ladders
    assert config.training.beta == 0.0 and (config.training.epsilon, config.training.epsilon_high) == (0.2, 0.28)


def test_toml_roundtrip_and_overrides(tmp_path):
    path = tmp_path / "node.toml"
    path.write_text('[training]\nnum_generations = 8\nexternal_groups = 0\n[swarm]\nswarm_name = "lab"\n')
    config = NodeConfig.load(path, {"training": {"local_questions": 3, "num_generations": UNSET}})
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
        ({"training": {"peer_choice": "best"}}, "[training] peer_choice"),
        ({"training": {"peer_advantages": "negative"}}, "[training] peer_advantages"),
        ({"training": {"scale_rewards": "batch"}}, "[training] scale_rewards"),
        ({"training": {"anchor_decay": -1.0}}, "[training] anchor_decay: Input should be greater than or equal to 0"),
        ({"training": {"anchor_decay": 10.0, "lora_rank": 16}}, "set anchor_decay = 0 to train a LoRA adapter"),
        ({"training": {"anchor_decay": 1e5, "learning_rate": 1e-5}}, "lower anchor_decay below 100000"),
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


def test_the_peer_choice_is_sapos_uniform_one_unless_teaching_first_is_asked_for(tmp_path):
    assert NodeConfig.build().training.peer_choice == "uniform"
    older = tmp_path / "older.toml"  # written before the setting existed
    older.write_text("[training]\nexternal_groups = 3\n")
    assert NodeConfig.load(older).training.peer_choice == "uniform"
    chosen = tmp_path / "teaching.toml"
    chosen.write_text('[training]\npeer_choice = "teaching"\n')
    assert NodeConfig.load(chosen).training.peer_choice == "teaching"
    assert config_from_args(_parser().parse_args(["run", "--peer-choice", "teaching"])).training.peer_choice == "teaching"


def test_the_pull_toward_the_starting_weights_is_off_unless_asked_for(tmp_path):
    assert NodeConfig.build().training.anchor_decay == 0.0
    path = tmp_path / "anchor.toml"
    path.write_text("[training]\nanchor_decay = 1000.0\n")
    assert NodeConfig.load(path).training.anchor_decay == 1000.0
    assert config_from_args(_parser().parse_args(["run", "--anchor-decay", "20"])).training.anchor_decay == 20.0


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


def test_update_sets_every_value_given_and_unset_keeps(tmp_path):
    config = NodeConfig.build({"run": {"data_dir": str(tmp_path), "threads": 3}, "upload": {"repo_id": "a/b"}})
    assert config.update({"run": {"threads": UNSET}}).run.threads == 3  # a flag not given
    cleared = config.update({"run": {"threads": None}, "upload": {"repo_id": None, "every_rounds": 5}})
    assert cleared.run.threads is None and cleared.upload.repo_id is None and cleared.upload.every_rounds == 5
    assert cleared.run.data_dir == config.run.data_dir and cleared.training == config.training
    with pytest.raises(NodeError, match=r"\[run\] threads"):
        config.update({"run": {"threads": 0}})
    with pytest.raises(NodeError, match=r"\[training\] num_generations"):
        config.update({"training": {"num_generations": None}})  # None is "automatic" only where a field has it


def test_run_flags_are_generated_from_every_config_field():
    """Each scalar field of [training], [swarm], [evaluation], [run] and [chain] is a flag with its type, description, bounds and
    default; a field added to the config is a flag without touching the CLI."""
    flags = {(flag.section, flag.field): flag for flag in config_flags()}
    for section in FLAG_SECTIONS:
        for name, info in getattr(NodeConfig.model_fields[section].annotation, "model_fields").items():
            if (section, name) == ("swarm", "initial_peers"):
                continue
            assert (section, name) in flags, f"[{section}] {name} has no flag"
            flag = flags[(section, name)]
            assert flag_name(section, name) in flag.names
            if info.description:
                assert info.description.replace("%", "%%") in flag.kwargs["help"]
    assert "choices" in flags[("training", "device")].kwargs
    assert flags[("training", "num_generations")].kwargs["type"] is int
    assert ">= 2" in flags[("training", "num_generations")].kwargs["help"]
    assert "<= 64" in flags[("training", "num_generations")].kwargs["help"]
    help_text = _parser()._subparsers._group_actions[0].choices["run"].format_help()
    assert "--eval-seed" in help_text and "--seed" in help_text
    assert "--epsilon-high" in help_text and "--drop-zero-advantage" in help_text and "--no-drop-zero-advantage" in help_text


def test_generated_flags_set_fields_and_flags_left_out_keep_the_file(tmp_path):
    path = tmp_path / "node.toml"
    path.write_text('[training]\nnum_generations = 8\nbeta = 0.04\n[run]\nthreads = 2\n')
    args = _parser().parse_args(["run", "--config", str(path), "--beta", "0.1", "--no-drop-zero-advantage",
                                 "--device", "cpu", "--gather-timeout", "7"])
    config = config_from_args(args)
    assert (config.training.beta, config.training.drop_zero_advantage, config.training.device) == (0.1, False, "cpu")
    assert config.swarm.gather_timeout_s == 7.0
    assert config.training.num_generations == 8 and config.run.threads == 2  # not given: the file's values
    with pytest.raises(SystemExit):
        _parser().parse_args(["run", "--device", "tpu"])


def test_the_hardware_answer_round_trips_through_the_seam_codec_and_tolerates_skew():
    from node.api import HardwareReport
    from tests.test_app_wizard import CPU_LAPTOP

    report = HardwareReport.from_json(CPU_LAPTOP)
    assert report.recommendation.local_questions == 3 and report.model("bundled").label == "fits"
    assert HardwareReport.from_json(report.to_json()) == report
    newer = {**CPU_LAPTOP, "recommendation": {**CPU_LAPTOP["recommendation"], "added_later": True}}
    assert HardwareReport.from_json(newer) == report  # fields a newer node adds are ignored
    older = {**CPU_LAPTOP, "recommendation": {k: v for k, v in CPU_LAPTOP["recommendation"].items() if k != "threads"}}
    with pytest.raises(NodeError, match="Recommendation lacks threads"):
        HardwareReport.from_json(older)
    assert report.hardware.kind == "cpu" and report.hardware.budget_bytes == CPU_LAPTOP["hardware"]["total_ram_bytes"]
    gpu = {"name": "RTX 4090", "total_memory_bytes": 24 * 2**30, "compute_capability": [8, 9], "index": 0}
    cuda = HardwareReport.from_json({**CPU_LAPTOP, "hardware": {**CPU_LAPTOP["hardware"], "kind": "cuda", "gpus": [gpu]}})
    assert cuda.kind == "cuda" and cuda.hardware.budget_bytes == 24 * 2**30  # a model trains in GPU memory there
    no_ram = {k: v for k, v in CPU_LAPTOP["hardware"].items() if k != "total_ram_bytes"}
    with pytest.raises(NodeError, match="Hardware lacks total_ram_bytes"):
        HardwareReport.from_json({**CPU_LAPTOP, "hardware": no_ram})
