"""``rl-swarm-node wallet|chain ...``: the wallet and the on-chain coordinator (``chain status`` also says which
wallet owns this node's peer identity on chain; ``rl-swarm-node identity`` backs it up and restores it).

Secrets never come from the command line (other users can read it in the process list): recovery phrases and
private keys are read from standard input, passphrases from RL_SWARM_SECRET_PASSPHRASE or a hidden prompt.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path
from typing import Any

from node.config import NodeConfig, given
from node.errors import NodeError


def add_commands(commands: argparse._SubParsersAction) -> None:
    wallet = commands.add_parser("wallet", help="create, import, export or show the node's wallet")
    wallet_commands = wallet.add_subparsers(dest="wallet_command", required=True)
    create = wallet_commands.add_parser("create", help="new wallet; shows the recovery phrase once")
    create.add_argument("--words", type=int, choices=[12, 24], default=12)
    create.set_defaults(handler=_wallet_create)
    imp = wallet_commands.add_parser("import", help="import a recovery phrase or private key (stdin) or a keystore")
    source = imp.add_mutually_exclusive_group(required=True)
    source.add_argument("--mnemonic", action="store_true", help="read the recovery phrase from stdin")
    source.add_argument("--private-key", action="store_true", help="read the private key from stdin")
    source.add_argument("--keystore", type=Path, help="Ethereum keystore JSON file (asks its password)")
    imp.add_argument("--replace", action="store_true", help="replace an existing wallet of this name")
    imp.set_defaults(handler=_wallet_import)
    export = wallet_commands.add_parser("export", help="write an encrypted Ethereum keystore backup")
    export.add_argument("dest", type=Path)
    export.set_defaults(handler=_wallet_export)
    show = wallet_commands.add_parser("show", help="the wallet's address and where its key is kept")
    show.set_defaults(handler=_wallet_show)
    for parser in (create, imp, export, show):
        _common(parser, chain=False)
        parser.add_argument("--backend", choices=["auto", "keyring", "file"], default="auto",
                            help="where the key is kept (auto: the OS keyring when there is one)")

    chain = commands.add_parser("chain", help="the on-chain swarm coordinator")
    chain_commands = chain.add_subparsers(dest="chain_command", required=True)
    status = chain_commands.add_parser("status", help="RPC health, wallet, registration and on-chain totals")
    status.set_defaults(handler=_chain_status)
    deploy = chain_commands.add_parser("deploy", help="deploy your own SwarmCoordinator; prints its address")
    deploy.add_argument("--bootnode", action="append", default=[], help="multiaddr to list as bootnode (repeatable)")
    deploy.add_argument("--stages", type=int, default=1, metavar="N",
                        help="stages per round (default 1, as SAPO and coordinator 0.6.0; 3 as 0.4.x/0.5.x)")
    deploy.set_defaults(handler=_chain_deploy)
    register = chain_commands.add_parser("register", help="register this node's peer id to the wallet")
    register.set_defaults(handler=_chain_register)
    advance = chain_commands.add_parser(
        "advance", help="advance the swarm's round: every stage of it on a multi-stage coordinator (stage manager only)")
    advance.add_argument("--every", type=float, metavar="SECONDS",
                         help="keep advancing at this interval until Ctrl-C (the clock of a self-hosted swarm)")
    advance.add_argument("--stage", action="store_true", help="advance one stage only, not the whole round")
    advance.set_defaults(handler=_chain_advance)
    devnet = chain_commands.add_parser("devnet", help="run a local development chain (needs the devchain extra)")
    devnet.add_argument("--port", type=int, default=8545)
    devnet.add_argument("--fund", action="append", default=[], metavar="ADDRESS", help="give 100 ETH (repeatable)")
    devnet.set_defaults(handler=_chain_devnet)
    for parser in (status, deploy, register, advance):
        _common(parser, chain=True)


def _common(parser: argparse.ArgumentParser, *, chain: bool) -> None:
    parser.add_argument("--config", type=Path, help="node config file (TOML)")
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--wallet", help="wallet name (default: default)")
    if chain:
        parser.add_argument("--network", choices=["none", "gensyn-testnet", "local", "custom"])
        parser.add_argument("--rpc-url")
        parser.add_argument("--chain-id", type=int)
        parser.add_argument("--coordinator", help="SwarmCoordinator contract address")
        parser.add_argument("--coordinator-version", choices=["auto", "0.4.2", "0.4.3", "0.5.1", "0.6.0"],
                            help="the SwarmCoordinator interface the swarm runs (default auto: detect it); any other "
                            "is refused before anything is sent")


def _config(args: argparse.Namespace) -> NodeConfig:
    chain = {key: getattr(args, key, None) for key in ("network", "rpc_url", "chain_id", "coordinator", "coordinator_version")}
    chain["wallet"] = args.wallet
    changes: dict[str, Any] = {"run": given({"data_dir": args.data_dir}), "chain": given(chain)}
    if args.config:
        return NodeConfig.load(args.config, changes)
    return NodeConfig.build().update(changes, source="command line")


# ------------------------------------------------------------------------------------------------------ wallet
def _store(args: argparse.Namespace, *, new: bool = False):
    from node.chain.wallet import WalletStore
    from node.secret_store import keyring_available

    config = _config(args)
    backend = args.backend
    if backend == "auto":
        backend = "keyring" if keyring_available() else "file"
    existing = WalletStore(config.run.data_dir, config.chain.wallet, backend="file").info()
    if existing is not None and not new:
        backend = existing.backend  # an existing wallet is read from where it was saved
    passphrase = _passphrase(new=new) if backend == "file" else None
    return WalletStore(config.run.data_dir, config.chain.wallet, backend=backend, passphrase=passphrase)


def _passphrase(*, new: bool) -> str:
    from node.chain.wallet import PASSPHRASE_ENV

    value = os.environ.get(PASSPHRASE_ENV)
    if value:
        return value
    if not sys.stdin.isatty():
        raise NodeError("the wallet passphrase is needed", hint=f"set {PASSPHRASE_ENV} or run in a terminal",
                        code="locked")
    value = getpass.getpass("wallet passphrase (no OS keyring here; the key is stored encrypted with it): ")
    if new and getpass.getpass("repeat the passphrase: ") != value:
        raise NodeError("the passphrases differ", hint="try again", code="passphrase_mismatch")
    return value


def _secret_line(prompt: str) -> str:
    if sys.stdin.isatty():
        return getpass.getpass(prompt)
    return sys.stdin.readline().strip()


def _wallet_create(args: argparse.Namespace) -> int:
    from node.chain.wallet import new_wallet

    store = _store(args, new=True)
    if store.exists():
        raise NodeError(f"a wallet {store.name!r} already exists ({store.info().address})",
                        hint="export a backup first; choose another --wallet name for a second one", code="wallet_exists")
    pending = new_wallet(words=args.words)
    print(f"address {pending.address}")
    print("Write these words down, in order, and keep them offline. They are shown only now:\n")
    for i, word in enumerate(pending.words, 1):
        print(f"  {i:>2}. {word}")
    print()
    if sys.stdin.isatty():
        input("press Enter when they are written down (the screen is cleared)")
        print("\033[2J\033[H", end="")
    answers = {i: input(f"word {i}: ") for i in pending.quiz}
    info = store.save_new(pending, answers)
    print(f"wallet {info.name} saved ({info.address}) in the {store.secrets.describe()}")
    return 0


def _wallet_import(args: argparse.Namespace) -> int:
    store = _store(args, new=True)
    if args.mnemonic:
        info = store.import_mnemonic(_secret_line("recovery phrase: "), replace=args.replace)
    elif args.private_key:
        info = store.import_private_key(_secret_line("private key: "), replace=args.replace)
    else:
        info = store.import_keystore(args.keystore, _secret_line("keystore password: "), replace=args.replace)
    print(f"wallet {info.name} imported ({info.address}) into the {store.secrets.describe()}")
    return 0


def _wallet_export(args: argparse.Namespace) -> int:
    store = _store(args)
    password = _secret_line("password for the backup keystore: ")
    path = store.export_keystore(args.dest, password)
    print(f"keystore backup written to {path}")
    return 0


def _wallet_show(args: argparse.Namespace) -> int:
    from node.chain.wallet import WalletStore

    config = _config(args)
    info = WalletStore(config.run.data_dir, config.chain.wallet, backend="file").info()
    if info is None:
        raise NodeError(f"there is no wallet {config.chain.wallet!r}", hint="`rl-swarm-node wallet create`",
                        code="no_wallet")
    where = "OS keyring" if info.backend == "keyring" else "encrypted file (passphrase)"
    print(f"wallet {info.name}: {info.address} (key in the {where}; {info.source})")
    return 0


# ------------------------------------------------------------------------------------------------------- chain
def _client(args: argparse.Namespace, *, need_coordinator: bool = True, account: bool = True):
    from node.chain import networks, versions
    from node.chain.coordinator import CoordinatorClient
    from node.chain.participant import unlock_node_wallet

    config = _config(args)
    target = networks.resolve(config.chain, need_coordinator=need_coordinator)
    if target is None:
        raise NodeError("no chain is configured", hint="pass --network (and --coordinator) or set [chain] in --config",
                        code="no_chain")
    wallet = unlock_node_wallet(config) if account else None
    expected = versions.expected(config.chain.coordinator_version)
    client = CoordinatorClient(target, wallet, version=expected) if target.coordinator else None
    return config, target, wallet, client


def _chain_status(args: argparse.Namespace) -> int:
    from node.chain.account import account_summary
    from node.chain.wallet import WalletStore
    from node.swarm.identity import load_or_create

    config = _config(args)
    info = WalletStore(config.run.data_dir, config.chain.wallet, backend="file").info()
    if info is None:
        raise NodeError("there is no wallet yet", hint="`rl-swarm-node wallet create` or `wallet import`", code="no_wallet")
    identity = load_or_create(config.identity_path)
    s = account_summary(config, info.address, identity.peer_id)
    rpc = s.rpc
    print(f"network   {s.network_label}: {rpc.rpc_url} "
          + (f"chain id {rpc.chain_id}, block {rpc.block_number}, {rpc.latency_ms:.0f} ms" if rpc.ok else f"DOWN ({rpc.message})"))
    print(f"wallet    {s.address}  balance {s.balance_eth or '?'}")
    print(f"peer      {identity.name} ({s.peer_id})")
    print(f"contract  {s.coordinator or '(none set)'}  {_position(s.chain_round, s.chain_stage, s.stage_count)}"
          + (f"  (SwarmCoordinator {s.coordinator_version} interface)" if s.coordinator_version else ""))
    if s.owned_by_other:
        print(f"WARNING: this peer id is registered to another wallet ({s.owner}); submissions would be refused")
    else:
        print(f"registered {'yes' if s.registered else 'no' if s.registered is False else '?'}")
    print(f"totals    rewards {_q(s.total_rewards)}  wins {_q(s.total_wins)}  rounds voted {_q(s.votes_cast)}")
    for tx in s.transactions[:10]:
        where = tx.explorer_url or tx.tx_hash or ""
        print(f"  {tx.action:<8} round {'-' if tx.round is None else tx.round:>6} {tx.status:<16} {where} {tx.message}")
    for problem in s.problems:
        print(f"problem: {problem}", file=sys.stderr)
    if s.version_problem:
        print(f"  how to fix: {s.version_problem.hint}", file=sys.stderr)
    return 0 if rpc.ok and s.version_problem is None else 1


def _q(value: int | None) -> str:
    return "?" if value is None else str(value)


def _position(round_: int | None, stage: int | None, stages: int | None) -> str:
    text = f"round {_q(round_)}"
    if stages is not None and stages > 1:
        text += f", stage {'?' if stage is None else stage + 1} of {stages}"  # counted from 1, as the app shows it
    return text


def _chain_deploy(args: argparse.Namespace) -> int:
    from node.chain import versions
    from node.chain.coordinator import CoordinatorClient, deploy_coordinator

    config, target, wallet, _ = _client(args, need_coordinator=False)
    expected = versions.expected(config.chain.coordinator_version)
    deploys = versions.deployed_by_us(args.stages)
    if expected is not None and expected != deploys:
        raise NodeError(
            f"[chain] coordinator_version is {expected}, but a coordinator with {args.stages} stage(s) per round speaks "
            f"{deploys or 'no public interface version'}",
            hint="deploy with --stages 1 (0.6.0) or --stages 3 (0.5.1) to match, or set coordinator_version = \"auto\"",
            code="chain_version",
        )
    result = deploy_coordinator(target, wallet, stages=args.stages)
    print(f"deployed SwarmCoordinator at {result.address} ({args.stages} stage(s) per round; tx {result.tx_hash}, "
          f"gas {result.gas_used})")
    if args.bootnode:
        from dataclasses import replace

        CoordinatorClient(replace(target, coordinator=result.address), wallet, version=expected).add_bootnodes(
            args.bootnode)
        print(f"listed {len(args.bootnode)} bootnode(s)")
    print(f"nodes join it with: [chain] network = \"{target.network}\", coordinator = \"{result.address}\"")
    print(result.address)
    return 0


def _chain_register(args: argparse.Namespace) -> int:
    from node.swarm.identity import load_or_create

    config, target, wallet, client = _client(args)
    identity = load_or_create(config.identity_path)
    owner = client.owner_of(identity.peer_id)
    if owner is not None and owner != wallet.address:
        raise NodeError(
            f"the peer identity {identity.name} ({identity.peer_id}) already belongs to wallet {owner}",
            hint="log in with that wallet, or use another identity file; it cannot be registered to "
            f"{wallet.address}", code="identity_taken",
        )
    result = client.register_peer(identity.peer_id)
    if result is None:
        print(f"{identity.name} ({identity.peer_id}) is already registered to {wallet.address}")
    else:
        print(f"registered {identity.name} ({identity.peer_id}) to {wallet.address} (tx {result.tx_hash})")
    return 0


def _chain_advance(args: argparse.Namespace) -> int:
    import time

    _, _, _, client = _client(args)
    if args.every is not None and args.every < 1:
        raise NodeError("--every must be at least 1 second", hint="e.g. --every 120", code="bad_interval")
    while True:
        try:
            if args.stage:
                client.advance_stage()
            else:
                client.advance_round()
            round_, stage = client.position()
            print(f"{_position(round_, stage, client.stage_count())} (coordinator {client.version.name})", flush=True)
        except NodeError as exc:
            if args.every is None or exc.code in ("chain_revert", "chain_version", "no_contract"):
                raise
            print(f"could not advance now ({exc.message}); trying again", file=sys.stderr, flush=True)
        if args.every is None:
            return 0
        try:
            time.sleep(args.every)
        except KeyboardInterrupt:
            return 0


def _chain_devnet(args: argparse.Namespace) -> int:
    import threading

    try:
        from node.chain.devchain import DevChain

        chain = DevChain(port=args.port)
    except RuntimeError as exc:
        raise NodeError(str(exc), hint='pip install -e ".[devchain]"', code="no_devchain") from None
    chain.start()
    for address in args.fund:
        chain.fund(address, 100 * 10**18)
    print(f"local development chain at {chain.url} (chain id {chain.chain_id}); Ctrl-C stops it (its state is lost)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        chain.stop()
    return 0
