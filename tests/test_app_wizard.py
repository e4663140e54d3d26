"""The first-run wizard, offscreen, driven by clicks on its buttons as a user drives it (tests/wizard_clicks.py).

It asks the real node CLI for identity and hardware in test_wizard_joins_a_swarm_with_a_model_that_fits (and in the
first run, tests/test_app_first_run.py); the other tests, about what the wizard does with the answers, have them
answered at once (each real pair of queries is a child process that imports torch)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from app import wizard as wizard_module
from app.saved_swarms import load_networks
from app.wizard import SetupWizard
from app.wizard_flow import NUMBERS, STEP_COUNT, Step, every_choice, path
from node.api import BUNDLED, SMOLLM2_135M, HardwareReport
from node.config import NodeConfig
from node.swarm.invite import format_invite, parse_invite
from tests.wizard_clicks import click, click_row, press_finish, press_next, shown_buttons, type_into, walk_to

PEER = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"
INVITE = format_invite("study-group", [f"/ip4/192.168.1.7/tcp/31337/p2p/{PEER}"])
QUERY_MS = 180_000  # the hardware query imports torch in a child process
GIB = 2**30
# What `rl-swarm-node hardware --json` answers on a CPU-only laptop: fixed here, so the model page is tested the same
# on every machine (the real answer depends on this machine's GPU and free memory).
CPU_LAPTOP = {
    "hardware": {"kind": "cpu", "description": "8 cores, 16.0 GiB RAM", "physical_cores": 8,
                 "total_ram_bytes": 16 * GIB, "available_ram_bytes": 12 * GIB, "gpus": [], "a_field_from_a_newer_node": 1},
    "recommendation": {"model": BUNDLED, "device": "cpu", "train_dtype": "float32", "generation_dtype": "bfloat16",
                       "num_generations": 4, "local_questions": 3, "external_groups": 2, "max_new_tokens": 64,
                       "micro_batch_groups": 1, "threads": 7, "reason": "no GPU: the bundled model"},
    "models": [
        {"id": "Qwen/Qwen2.5-1.5B-Instruct", "name": "Qwen2.5-1.5B-Instruct", "description": "big",
         "download_bytes": 3 * GIB, "required_bytes": 40 * GIB, "label": "won't fit"},
        {"id": BUNDLED, "name": "SmolLM2-135M-Instruct (bundled)", "description": "offline",
         "download_bytes": 0, "required_bytes": 3 * GIB, "label": "fits"},
        {"id": SMOLLM2_135M, "name": "SmolLM2-135M-Instruct", "description": "from the Hub",
         "download_bytes": GIB // 4, "required_bytes": 3 * GIB, "label": "fits"},
    ],
}


class InstantQuery:
    """``rl-swarm-node identity|hardware --json`` answered without a child process."""

    def __init__(self, args, done, failed, parent=None) -> None:
        done({"name": "calm-fox", "peer_id": PEER, "path": "swarm.key"} if args[0] == "identity" else CPU_LAPTOP)


@pytest.fixture
def answered_at_once(monkeypatch):
    monkeypatch.setattr(wizard_module, "NodeQuery", InstantQuery)


def welcome(qtbot, tmp_path, config_changes: dict | None = None) -> SetupWizard:
    """The wizard as it opens, once the node answered its identity and hardware queries."""
    config = NodeConfig.build({"run": {"data_dir": str(tmp_path / "data")}, **(config_changes or {})})
    wizard = SetupWizard(config, tmp_path / "networks.toml")
    qtbot.addWidget(wizard)
    wizard.show()
    qtbot.waitUntil(lambda: wizard.identity_page.peer is not None and wizard.hardware_page.data is not None,
                    timeout=QUERY_MS)
    return wizard


def open_wizard(qtbot, tmp_path, config_changes: dict | None = None) -> SetupWizard:
    """The wizard on its first step, after the welcome page's Next."""
    wizard = welcome(qtbot, tmp_path, config_changes)
    assert wizard.currentPage() is wizard.welcome_page and "four short steps" in wizard.welcome_page.findChild(
        QLabel).text()
    assert shown_buttons(wizard) == {"Next", "Cancel"}
    press_next(qtbot, wizard)
    assert wizard.identity_page.title().startswith("Step 1 of 4")
    return wizard


def test_every_path_through_the_wizard_ends_on_the_swarm_step_with_finish():
    for choices in every_choice():
        steps = path(choices)  # raises where a step leads back to an earlier one
        assert steps[0] is Step.WELCOME and steps[-1] is Step.SWARM
        numbers = [NUMBERS[step] for step in steps[1:]]
        assert numbers == sorted(numbers) and numbers[0] == 1 and numbers[-1] == STEP_COUNT
        assert (Step.WALLET in steps) == choices.wallet
    assert {step for choices in every_choice() for step in path(choices)} == set(Step)


@pytest.mark.usefixtures("answered_at_once")
def test_the_wizard_keeps_its_size_on_every_page(qtbot, tmp_path):
    wizard = welcome(qtbot, tmp_path)
    size = wizard.size()
    press_next(qtbot, wizard)
    assert wizard.size() == size, f"the first step: {wizard.size()} after {size}"
    click(wizard.identity_page.wallet)  # the longest path
    while wizard.currentPage() is not wizard.swarm_page:
        if wizard.currentPage() is wizard.wallet_page:
            click(wizard.button(wizard.WizardButton.BackButton))
            click(wizard.identity_page.local_only)
        press_next(qtbot, wizard, timeout=QUERY_MS)
        assert wizard.size() == size, f"{wizard.currentPage().title()}: {wizard.size()} after {size}"


@pytest.mark.usefixtures("answered_at_once")
def test_the_last_page_shows_finish_and_pressing_it_saves_and_closes(qtbot, tmp_path):
    wizard = open_wizard(qtbot, tmp_path)
    for page in (wizard.identity_page, wizard.hardware_page, wizard.model_page):
        assert wizard.currentPage() is page and shown_buttons(wizard) == {"Back", "Next", "Cancel"}
        press_next(qtbot, wizard)
    assert wizard.currentPage() is wizard.swarm_page and wizard.swarm_page.title().startswith("Step 4 of 4")
    assert shown_buttons(wizard) == {"Back", "Finish", "Cancel"}
    for mode in (wizard.swarm_page.join, wizard.swarm_page.preset, wizard.swarm_page.new):
        click(mode)  # the last page stays the last whatever the swarm
        assert "Finish" in shown_buttons(wizard) and "Next" not in shown_buttons(wizard)
    qtbot.keyClick(wizard.swarm_page.swarm_name, Qt.Key.Key_Return)  # Enter finishes, as Finish does
    qtbot.waitUntil(lambda: not wizard.isVisible(), timeout=5_000)
    assert wizard.result() == SetupWizard.DialogCode.Accepted and wizard.result_config is not None


def test_wizard_joins_a_swarm_with_a_model_that_fits(qtbot, tmp_path):
    wizard = open_wizard(qtbot, tmp_path)
    peer = wizard.identity_page.peer
    assert peer["name"] in wizard.identity_page.peer_label.text()
    assert wizard.identity_page.local_only.isChecked()
    assert (tmp_path / "data" / "identity" / "swarm.key").exists()
    real = wizard.hardware_page.data
    assert isinstance(real, HardwareReport) and real.recommendation is not None  # the real answer decodes
    wizard.hardware_page._loaded(CPU_LAPTOP)  # the answer goes through the same seam codec
    press_next(qtbot, wizard)
    assert "CPU only" in wizard.hardware_page.found.text() and "3 questions" in wizard.hardware_page.advice.text()
    press_next(qtbot, wizard)
    models = wizard.model_page
    assert models.selected().id == BUNDLED  # the recommendation is preselected
    click_row(models.table, 0)  # the model that won't fit
    assert not models.isComplete() and "won't fit" in models.note.text()
    assert not wizard.button(wizard.WizardButton.NextButton).isEnabled()
    click_row(models.table, 2)
    assert models.isComplete() and "downloads" in models.note.text()
    click_row(models.table, 1)
    press_next(qtbot, wizard)

    swarm = wizard.swarm_page
    assert swarm.new.isChecked() and peer["peer_id"] in parse_invite(swarm.invite_preview.text()).peers[0]
    click(swarm.join)
    type_into(swarm.invite_text, "not an invite")
    assert not swarm.isComplete() and "Not a valid invite" in swarm.invite_status.text()
    assert not wizard.button(wizard.WizardButton.FinishButton).isEnabled()
    type_into(swarm.invite_text, INVITE)
    assert swarm.isComplete() and "study-group" in swarm.invite_status.text()
    click(swarm.save_as)
    assert not wizard.button(wizard.WizardButton.FinishButton).isEnabled()  # a saved network needs a name
    type_into(swarm.save_name, "Study group")
    press_finish(qtbot, wizard)
    assert not wizard.isVisible()

    config = wizard.result_config
    assert config.training.model == "bundled"
    assert config.swarm.swarm_name == "study-group" and config.swarm.initial_peers == list(parse_invite(INVITE).peers)
    saved = [n for n in load_networks(tmp_path / "networks.toml") if n.name == "Study group"]
    assert saved and saved[0].initial_peers == config.swarm.initial_peers


@pytest.mark.usefixtures("answered_at_once")
def test_wizard_starts_a_new_swarm_on_a_fixed_port(qtbot, tmp_path):
    wizard = open_wizard(qtbot, tmp_path)
    walk_to(qtbot, wizard, wizard.swarm_page)
    swarm = wizard.swarm_page
    type_into(swarm.swarm_name, "my-swarm")
    type_into(swarm.port, "40123")
    invite = parse_invite(swarm.invite_preview.text())
    assert invite.swarm_name == "my-swarm" and all("/tcp/40123/" in a for a in invite.peers)
    press_finish(qtbot, wizard)
    assert wizard.result_config.swarm.port == 40123 and wizard.result_config.swarm.initial_peers == []
    assert wizard.result_config.training.local_questions == wizard.hardware_page.data.recommendation.local_questions


@pytest.mark.usefixtures("answered_at_once")
def test_wizard_offers_the_saved_networks(qtbot, tmp_path):
    wizard = open_wizard(qtbot, tmp_path)
    walk_to(qtbot, wizard, wizard.swarm_page)
    swarm = wizard.swarm_page
    click(swarm.preset)
    assert swarm.preset_combo.count() >= 1 and "loopback" in swarm.preset_combo.itemText(0)
    press_finish(qtbot, wizard)
    assert wizard.result_config.swarm.host == "127.0.0.1"


def _with_adapters(report: dict) -> dict:
    """The laptop's answer with the node's LoRA figures: the 1.5B model fits only as an adapter. The labels that
    come with them are stale (the page labels each figure against total memory itself)."""
    lora = {"Qwen/Qwen2.5-1.5B-Instruct": 9 * GIB, BUNDLED: GIB, SMOLLM2_135M: GIB}
    return {**report, "models": [{**m, "required_bytes_lora": lora[m["id"]], "label_lora": "won't fit"}
                                 for m in report["models"]]}


def _model_page(qtbot, tmp_path, config_changes: dict | None = None):
    wizard = open_wizard(qtbot, tmp_path, config_changes)
    wizard.hardware_page._loaded(_with_adapters(CPU_LAPTOP))
    walk_to(qtbot, wizard, wizard.model_page)
    return wizard, wizard.model_page


@pytest.mark.usefixtures("answered_at_once")
def test_the_model_step_shows_all_weights_and_an_adapter_side_by_side(qtbot, tmp_path):
    wizard, models = _model_page(qtbot, tmp_path)
    header = [models.table.horizontalHeaderItem(c).text() for c in range(4)]
    assert header == ["Model", "Download", "All weights", "LoRA adapter"]
    # Both figures of every model, labelled against the laptop's 16 GiB in total.
    assert [models.table.item(0, c).text() for c in (2, 3)] == ["40.0 GiB, won't fit", "9.0 GiB, fits"]
    assert [models.table.item(1, c).text() for c in (2, 3)] == ["3.0 GiB, fits", "1.0 GiB, fits"]
    assert models.selected().id == BUNDLED and not models.trains_lora() and models.isComplete()

    click_row(models.table, 0)  # fits only as an adapter: the adapter is chosen for it, all weights cannot be
    assert models.trains_lora() and models.isComplete() and not models.full.isEnabled()
    assert "LoRA adapter" in models.note.text() and "all weights won't fit here" in models.note.text()
    walk_to(qtbot, wizard, wizard.swarm_page)
    press_finish(qtbot, wizard)
    config = wizard.result_config
    default = type(config.training).model_fields["learning_rate"].default
    assert config.training.model == "Qwen/Qwen2.5-1.5B-Instruct" and config.training.lora_rank == 16
    assert config.training.learning_rate == 10 * default


@pytest.mark.usefixtures("answered_at_once")
def test_the_training_choice_lands_in_the_config_and_is_shown_again(qtbot, tmp_path):
    wizard, models = _model_page(qtbot, tmp_path)
    click(models.lora)  # the bundled model fits either way: the user's choice stands
    assert models.trains_lora() and models.isComplete()
    click_row(models.table, 2)
    assert models.trains_lora()  # kept while browsing models
    click_row(models.table, 1)
    walk_to(qtbot, wizard, wizard.swarm_page)
    press_finish(qtbot, wizard)
    chosen = wizard.result_config
    assert (chosen.training.model, chosen.training.lora_rank) == (BUNDLED, 16)

    again, page = _model_page(qtbot, tmp_path, {"training": {"lora_rank": 16, "learning_rate": 3e-5}})
    assert page.trains_lora()  # an adapter run opens with the adapter chosen
    click(page.full)
    walk_to(qtbot, again, again.swarm_page)
    press_finish(qtbot, again)
    config = again.result_config
    assert config.training.lora_rank == 0 and config.training.learning_rate == 3e-5  # the user's own rate is kept
