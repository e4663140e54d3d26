"""Wallet login in the wizard and the account page, against a real local chain (eth-tester over loopback HTTP)."""

from __future__ import annotations

from app.account_page import AccountPage
from app.wizard import SetupWizard
from app.wizard_flow import Step
from node.chain.wallet import WalletStore
from node.config import NodeConfig
from tests.chain_helpers import deployed, devchain, funded_account  # noqa: F401 - devchain is a fixture
from tests.wizard_clicks import NEXT, button_named, choose, click, press_finish, press_next, type_into, walk_to

PEER = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"
OTHER_PEER = "QmSC4ZigCVQwsb531fxsEeLGG2QVmhTgrYCM8Y5U4ZWGph"
PASSPHRASE = "correct horse battery"


def test_wizard_creates_a_wallet_after_the_phrase_is_confirmed(qtbot, tmp_path, devchain):  # noqa: F811
    owner = funded_account(devchain)
    target, _ = deployed(devchain, owner)
    config = NodeConfig.build({"run": {"data_dir": str(tmp_path / "data")}})
    wizard = SetupWizard(config, tmp_path / "networks.toml")
    qtbot.addWidget(wizard)
    wizard.show()
    walk_to(qtbot, wizard, wizard.identity_page, timeout=180_000)
    click(wizard.identity_page.wallet)
    press_next(qtbot, wizard, timeout=180_000)  # the identity page waits for the node's answer
    assert wizard.currentId() == Step.WALLET and wizard.wallet_page.title().startswith("Step 1 of 4")
    page = wizard.wallet_page
    assert page.file_store  # no OS keyring here: the key is sealed with a passphrase
    choose(page.network, "local")
    type_into(page.rpc, devchain.url)
    type_into(page.coordinator, target.coordinator)
    click(button_named(page, "Check network"))
    qtbot.waitUntil(lambda: "Connected" in page.network_status.text(), timeout=30_000)

    click(button_named(page, "Generate recovery phrase"))
    pending = page.pending
    assert all(word in page.words.text() for word in pending.words)
    type_into(page.passphrase, PASSPHRASE)
    type_into(page.repeat, PASSPHRASE)
    for edit in page.quiz.values():
        type_into(edit, "wrong")
    click(wizard.button(NEXT))
    assert wizard.currentId() == Step.WALLET and "do not match" in page.error.text()
    assert page.error.visibleRegion().boundingRect().height() >= page.error.height() // 2  # scrolled into view
    for position, edit in page.quiz.items():
        type_into(edit, pending.words[position - 1])
    press_next(qtbot, wizard)
    assert wizard.currentId() == Step.HARDWARE
    assert pending.address not in page.words.text()  # the phrase is not shown again

    walk_to(qtbot, wizard, wizard.swarm_page, timeout=180_000)
    press_finish(qtbot, wizard)
    chain = wizard.result_config.chain
    assert (chain.network, chain.rpc_url, chain.coordinator) == ("local", devchain.url, target.coordinator)
    assert wizard.passphrase == PASSPHRASE
    info = WalletStore(config.run.data_dir).info()
    assert info.address == pending.address
    on_disk = b"".join(p.read_bytes() for p in config.run.data_dir.rglob("*") if p.is_file())
    assert " ".join(pending.words).encode() not in on_disk and pending._key[2:].encode() not in on_disk


def test_account_page_shows_registration_totals_and_a_foreign_owner(qtbot, tmp_path, devchain):  # noqa: F811
    owner = funded_account(devchain)
    target, admin = deployed(devchain, owner)
    me = funded_account(devchain)
    config = NodeConfig.build({
        "run": {"data_dir": str(tmp_path / "data")},
        "chain": {"network": "local", "rpc_url": devchain.url, "coordinator": target.coordinator},
    })
    WalletStore(config.run.data_dir, passphrase=PASSPHRASE).import_private_key(me.key.hex())
    from node.chain.coordinator import CoordinatorClient

    mine = CoordinatorClient(target, me)
    mine.register_peer(PEER)
    mine.submit_reward(0, 750, PEER)
    admin.register_peer(OTHER_PEER)

    page = AccountPage(config)
    qtbot.addWidget(page)
    page.set_peer(PEER)
    qtbot.waitUntil(lambda: page.summary is not None and page.summary.peer_id == PEER, timeout=30_000)
    assert me.address in page.fields["address"].text()
    assert "ETH" in page.fields["balance"].text()
    assert page.fields["registration"].text() == "registered to this wallet"
    assert page.fields["rewards"].text() == "750"
    assert page.fields["round"].text() == "SwarmCoordinator 0.6.0 · round 0"  # the detected interface version

    page.summary = None
    page.set_peer(OTHER_PEER)
    qtbot.waitUntil(lambda: page.summary is not None and page.summary.peer_id == OTHER_PEER, timeout=30_000)
    assert "belongs to another wallet" in page.fields["registration"].text()


def test_account_page_shows_the_stage_of_a_multi_stage_coordinator(qtbot, tmp_path):
    from node.events import ChainStatus

    page = AccountPage(NodeConfig.build({"run": {"data_dir": str(tmp_path / "data")}}))
    qtbot.addWidget(page)
    page.on_event(ChainStatus(
        network="local", rpc_url="http://127.0.0.1:8545", coordinator="0x" + "ab" * 20, address="0x" + "cd" * 20,
        connected=True, chain_id=1, block_number=9, chain_round=4, registered=True, pending_submissions=0,
        coordinator_version="0.5.1", chain_stage=1, stage_count=3,
    ))
    assert page.fields["round"].text() == "SwarmCoordinator 0.5.1 · round 4, stage 2 of 3"


def test_account_page_without_a_chain_says_local_only(qtbot, tmp_path):
    page = AccountPage(NodeConfig.build({"run": {"data_dir": str(tmp_path / "data")}}))
    qtbot.addWidget(page)
    assert "Local only" in page.status.text() and not page.refresh_button.isEnabled()
