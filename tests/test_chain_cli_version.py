"""`rl-swarm-node chain ...` honours ``[chain] coordinator_version``: a coordinator that speaks another interface
than the configured one is refused before anything is read as the swarm's or sent, by every chain command, as the
node refuses it. Driven in process through the CLI's real entry point against a local chain over HTTP, with the
committed 0.4.2 / 0.4.3 builds and our 0.6.0 contract."""

from __future__ import annotations

import pytest
from eth_account import Account

from node.chain.account import account_summary
from node.chain.wallet import PASSPHRASE_ENV, WalletStore
from node.cli.main import main
from node.config import NodeConfig
from tests.chain_helpers import ETH, deployed, devchain  # noqa: F401 - fixture

# a configured version the deployed one is not
WRONG = {"0.4.2": "0.6.0", "0.4.3": "0.4.2", "0.6.0": "0.4.3"}


@pytest.fixture
def cli_wallet(tmp_path, monkeypatch):
    """A wallet in the CLI's data folder, unlocked by passphrase as a headless node's is."""
    monkeypatch.setenv(PASSPHRASE_ENV, "cli passphrase")
    account = Account.create()
    WalletStore(tmp_path, "default", backend="file", passphrase="cli passphrase").import_private_key(account.key.hex())
    return account


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("version", sorted(WRONG))
def test_chain_commands_refuse_a_coordinator_of_another_version(devchain, tmp_path, capsys, cli_wallet,  # noqa: F811
                                                                 version):
    devchain.fund(cli_wallet.address, 10 * ETH)
    target, admin = deployed(devchain, cli_wallet, version)  # the CLI's wallet is the stage manager: it could advance
    config_file = tmp_path / "node.toml"
    config_file.write_text(f'[chain]\ncoordinator_version = "{WRONG[version]}"\n', encoding="utf-8")
    where = ("--config", str(config_file), "--data-dir", str(tmp_path), "--network", "local", "--rpc-url",
             devchain.url, "--coordinator", target.coordinator)
    nonce = devchain.w3.eth.get_transaction_count(cli_wallet.address)
    mismatch = f"speaks the {version} interface, not {WRONG[version]}"

    code, out, err = run_cli(capsys, "chain", "status", *where)
    assert code == 1 and mismatch in err and "how to fix" in err, (out, err)
    code, _, err = run_cli(capsys, "chain", "register", *where)
    assert code == 2 and mismatch in err
    code, _, err = run_cli(capsys, "chain", "advance", "--stage", *where)
    assert code == 2 and mismatch in err
    code, _, err = run_cli(capsys, "chain", "advance", *where)
    assert code == 2 and mismatch in err
    # nothing was sent: no registration, no advance
    assert devchain.w3.eth.get_transaction_count(cli_wallet.address) == nonce
    assert admin.position() == (0, 0) and admin.peer_ids_of(cli_wallet.address) == []

    # what the app's account page reads says the same (the summary names the problem, reads nothing as the swarm's)
    config = NodeConfig.load(config_file, {"run": {"data_dir": str(tmp_path)}, "chain": {
        "network": "local", "rpc_url": devchain.url, "coordinator": target.coordinator}})
    summary = account_summary(config, cli_wallet.address)
    assert summary.version_problem is not None and mismatch in summary.version_problem.message
    assert summary.coordinator_version == "" and summary.chain_round is None

    # the right version (here from the flag, over the file) acts
    code, out, err = run_cli(capsys, "chain", "register", *where, "--coordinator-version", version)
    assert code == 0 and "registered" in out, err
    code, out, err = run_cli(capsys, "chain", "advance", "--stage", *where, "--coordinator-version", version)
    assert code == 0 and f"(coordinator {version})" in out, err
    code, out, err = run_cli(capsys, "chain", "status", *where, "--coordinator-version", "auto")
    assert code == 0 and "registered yes" in out and f"SwarmCoordinator {version} interface" in out, (out, err)


def test_deploy_refuses_a_stage_count_of_another_version_before_sending(devchain, tmp_path, capsys,  # noqa: F811
                                                                        cli_wallet):
    devchain.fund(cli_wallet.address, 10 * ETH)
    where = ("--data-dir", str(tmp_path), "--network", "local", "--rpc-url", devchain.url)
    nonce = devchain.w3.eth.get_transaction_count(cli_wallet.address)
    code, _, err = run_cli(capsys, "chain", "deploy", *where, "--coordinator-version", "0.6.0", "--stages", "3")
    assert code == 2 and "speaks 0.5.1" in err and "--stages 1" in err
    assert devchain.w3.eth.get_transaction_count(cli_wallet.address) == nonce
    code, out, err = run_cli(capsys, "chain", "deploy", *where, "--coordinator-version", "0.5.1", "--stages", "3",
                             "--bootnode", "/ip4/127.0.0.1/tcp/4001/p2p/QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N")
    assert code == 0 and "listed 1 bootnode(s)" in out, err
