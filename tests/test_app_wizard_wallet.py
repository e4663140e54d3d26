"""The wizard's wallet paths, finished by clicks: each way of bringing a wallet, on a network that is not reachable
(the wallet is set up offline; the node checks the chain when it starts). The node's identity and hardware answers are
given at once here; the real answers are tested in test_app_wizard, the local chain in test_app_chain."""

from __future__ import annotations

import json

import pytest
from eth_account import Account
from PySide6.QtWidgets import QScrollArea

from app import wizard as wizard_module
from app.wizard import SetupWizard
from app.wizard_flow import Step
from node.chain.wallet import WalletStore, new_wallet
from node.config import NodeConfig
from node.secret_store import PASSPHRASE_ENV
from tests.test_app_wizard import answered_at_once  # noqa: F401 - fixture
from tests.wizard_clicks import NEXT, button_named, choose, click, press_finish, press_next, type_into, walk_to

PASSPHRASE = "correct horse battery"
KNOWN_PHRASE = "test test test test test test test test test test test junk"  # hardhat's public dev phrase


pytestmark = pytest.mark.usefixtures("answered_at_once")


@pytest.fixture(autouse=True)
def no_passphrase_in_the_environment(monkeypatch):
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)


def wallet_page_of(qtbot, tmp_path) -> tuple[SetupWizard, wizard_module.WalletPage]:
    config = NodeConfig.build({"run": {"data_dir": str(tmp_path / "data")}})
    wizard = SetupWizard(config, tmp_path / "networks.toml")
    qtbot.addWidget(wizard)
    wizard.show()
    walk_to(qtbot, wizard, wizard.identity_page)
    click(wizard.identity_page.wallet)
    press_next(qtbot, wizard)
    assert wizard.currentId() == Step.WALLET
    page = wizard.wallet_page
    type_into(page.passphrase, PASSPHRASE)
    type_into(page.repeat, PASSPHRASE)
    return wizard, page


def keystore_file(tmp_path, key: str) -> str:
    path = tmp_path / "keystore.json"
    path.write_text(json.dumps(Account.encrypt(key, "keystore password", kdf="pbkdf2", iterations=2)))
    return str(path)


@pytest.mark.parametrize("mode", ["Import a recovery phrase", "Import a private key", "Import a keystore file"])
def test_each_wallet_import_finishes_the_wizard_on_a_network_out_of_reach(qtbot, tmp_path, mode):
    wizard, page = wallet_page_of(qtbot, tmp_path)
    assert page.network.currentData() == "gensyn-testnet"  # not checked: this machine cannot reach it
    click(button_named(page, mode))
    key = "0x" + "5a" * 32
    if mode == "Import a recovery phrase":
        type_into(page.phrase, KNOWN_PHRASE)
        expected = Account.from_mnemonic(KNOWN_PHRASE, account_path="m/44'/60'/0'/0/0").address
    elif mode == "Import a private key":
        type_into(page.private_key, key)
        expected = Account.from_key(key).address
    else:
        type_into(page.keystore_path, keystore_file(tmp_path, key))
        type_into(page.keystore_password, "keystore password")
        expected = Account.from_key(key).address
    press_next(qtbot, wizard)
    assert wizard.currentId() == Step.HARDWARE
    walk_to(qtbot, wizard, wizard.swarm_page)
    press_finish(qtbot, wizard)
    assert not wizard.isVisible() and wizard.result_config.chain.network == "gensyn-testnet"
    assert WalletStore(tmp_path / "data").info().address == expected and wizard.passphrase == PASSPHRASE


def test_nexts_error_is_in_view_with_the_network_details_open(qtbot, tmp_path):
    wizard, page = wallet_page_of(qtbot, tmp_path)
    wizard.resize(wizard.width(), 600)  # what a 1024x700 laptop screen leaves: the page scrolls
    choose(page.network, "custom")
    type_into(page.rpc, "http://127.0.0.1:9")  # nothing listens on the discard port
    click(button_named(page, "Check network"))
    qtbot.waitUntil(lambda: page.network_status.problem is not None, timeout=30_000)
    click(page.network_status.toggle)  # the failure's Details, opened
    assert page.network_status.details.isVisible()
    click(button_named(page, "Generate recovery phrase"))
    click(wizard.button(NEXT))  # the quiz is empty
    assert wizard.currentId() == Step.WALLET and "do not match" in page.error.text()
    assert page.findChild(QScrollArea).verticalScrollBar().maximum() > 0  # the case the test is about
    shown = page.error.visibleRegion().boundingRect()
    assert shown.height() == page.error.height() and shown.width() == page.error.width(), "the error is out of view"


def test_a_new_wallet_needs_its_phrase_generated_and_says_so(qtbot, tmp_path):
    wizard, page = wallet_page_of(qtbot, tmp_path)
    click(wizard.button(NEXT))
    assert wizard.currentId() == Step.WALLET and "Generate recovery phrase" in page.error.text()
    click(button_named(page, "Generate recovery phrase"))
    pending: object = page.pending
    for position, edit in page.quiz.items():
        type_into(edit, pending.words[position - 1])
    press_next(qtbot, wizard)
    walk_to(qtbot, wizard, wizard.swarm_page)
    press_finish(qtbot, wizard)
    assert WalletStore(tmp_path / "data").info().address == pending.address
    assert new_wallet().address != pending.address  # a fresh phrase each time
