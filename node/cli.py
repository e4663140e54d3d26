"""``rl-swarm-node``: run a swarm node, a local 3-node demo, or inspect hardware and invites."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil

from node import cli_hub
from node.config import NodeConfig, default_data_dir
from node.errors import NodeError
from node.invite import format_invite, parse_invite

INVITE_FILE = "invite.json"


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HIVEMIND_LOGLEVEL", "WARNING")
    # Apple silicon: ops MPS lacks run on the CPU instead of failing; torch reads this once, at import.
    os.environ.setdefault("PYTORCH_ENABLE_MPS_FALLBACK", "1")
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except NodeError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  how to fix: {exc.hint}", file=sys.stderr)
        return 2


# ------------------------------------------------------------------------------------------------------- run
def _cmd_run(args: argparse.Namespace) -> int:
    from node.events import EventBus, JsonLinesWriter, NodeStarted
    from node.logs import setup_logging
    from node.runner import SwarmNode

    config = config_from_args(args)
    log_path = setup_logging(config.run_dir, verbose=args.verbose)
    bus = EventBus()
    if args.events_jsonl:
        bus.subscribe(JsonLinesWriter(sys.stdout))
    else:
        bus.subscribe(_HumanProgress(log_path))
    invite_path = config.run.data_dir / INVITE_FILE

    def remember_invite(event) -> None:
        if isinstance(event, NodeStarted):
            invite_path.write_text(
                json.dumps({"pid": os.getpid(), "peer_id": event.peer_id, "swarm_name": event.swarm_name,
                            "invite": event.invite}),
                encoding="utf-8",
            )

    bus.subscribe(remember_invite)
    node = SwarmNode(config, bus=bus)
    _stop_on_signals(node)
    if args.control_stdin:
        threading.Thread(target=_read_controls, args=(node,), name="controls", daemon=True).start()
    try:
        node.run()
    finally:
        invite_path.unlink(missing_ok=True)
    return 0


class _HumanProgress:
    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path

    def __call__(self, event) -> None:
        kind = event.kind
        if kind == "node_started":
            print(f"peer {event.peer_name} ({event.peer_id}) on {event.device}, model {event.model}")
            print(f"run folder {event.run_dir}; log {self.log_path}")
            if event.resumed_from_round is not None:
                print(f"resumed after round {event.resumed_from_round}")
            invite = format_invite(event.swarm_name, event.invite)
            print(f"others join this swarm by pasting this invite into the app, or with\n"
                  f"  rl-swarm-node run --join '{invite}'")
        elif kind == "round_finished":
            external = "-" if event.reward_external is None else f"{event.reward_external:.3f}"
            print(
                f"round {event.round:>5} | reward local {event.reward_local:.3f} ext {external} | "
                f"loss {event.loss:+.4f} | peers {event.peers_seen} | groups shared {event.groups_shared} "
                f"received {event.groups_received} used {event.groups_used} rejected {event.groups_rejected} | "
                f"gen {event.seconds_generate:.1f}s ({event.generation_tokens_per_s:.0f} tok/s) "
                f"gather {event.seconds_gather:.1f}s train {event.seconds_train:.1f}s",
                flush=True,
            )
        elif kind == "state_changed" and event.state in ("waiting_for_peers", "paused", "stopping", "stopped"):
            print(f"[{event.state}] {event.detail}".rstrip(), flush=True)
        elif kind == "error":
            print(f"error: {event.message}" + (f" ({event.hint})" if event.hint else ""), file=sys.stderr)
        elif kind == "chain_transaction" and event.status != "retrying":
            where = event.explorer_url or event.tx_hash or ""
            round_ = "" if event.round is None else f" round {event.round}"
            print(f"chain: {event.action}{round_} {event.status} {where} {event.message}".rstrip(), flush=True)
        elif kind in ("peer_joined", "peer_left"):
            print(f"{event.peer_name} {'joined' if kind == 'peer_joined' else 'left'}", flush=True)


def _stop_on_signals(node) -> None:
    """First Ctrl-C / SIGTERM: stop after cleaning up. Second Ctrl-C: interrupt now (cleanup still runs)."""

    def handle(signum, frame) -> None:
        if node.stopping and signum == signal.SIGINT:
            raise KeyboardInterrupt
        print("stopping: finishing the current step and shutting the swarm down (Ctrl-C again to force)",
              file=sys.stderr, flush=True)
        node.stop()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)


def _read_controls(node) -> None:
    """Commands for a supervising process (the desktop app): one word per line on stdin."""
    actions = {"pause": node.pause, "resume": node.resume, "stop": node.stop}
    for line in sys.stdin:
        action = actions.get(line.strip().lower())
        if action:
            action()
    node.stop()  # the supervisor went away


def config_from_args(args: argparse.Namespace) -> NodeConfig:
    peers: list[str] = []
    invited_swarm = None
    for text in args.join or []:
        invite = parse_invite(text)
        peers += invite.peers
        invited_swarm = invited_swarm or invite.swarm_name
    overrides: dict[str, dict[str, Any]] = {
        "training": {
            "model": args.model, "device": args.device, "local_questions": args.local_questions,
            "external_groups": args.external_groups, "num_generations": args.num_generations,
            "max_new_tokens": args.max_new_tokens, "learning_rate": args.learning_rate,
            "micro_batch_groups": args.micro_batch_groups, "format_reward_weight": args.format_reward,
            "temperature": args.temperature,
        },
        "swarm": {
            "swarm_name": args.swarm_name or invited_swarm, "initial_peers": peers or None, "host": args.host,
            "port": args.port,
            "gather_timeout_s": args.gather_timeout,
        },
        "tasks": {"weights": {f: 1.0 for f in args.families.split(",")} if args.families else None},
        "run": {
            "data_dir": args.data_dir, "run_name": args.run_name, "rounds": args.rounds,
            "checkpoint_every": args.checkpoint_every, "threads": args.threads,
            "gpu_memory_fraction": args.gpu_memory_fraction, "identity_file": args.identity_file,
        },
        "chain": {"network": args.network, "rpc_url": args.rpc_url, "coordinator": args.coordinator, "wallet": args.wallet},
    }
    overrides = {section: {k: v for k, v in fields.items() if v is not None} for section, fields in overrides.items()}
    if args.config:
        return NodeConfig.load(args.config, overrides)
    return NodeConfig.build(overrides, source="command line")


# ---------------------------------------------------------------------------------------------- other commands
def _cmd_demo(args: argparse.Namespace) -> int:
    from node.demo import run_demo

    return run_demo(
        nodes=args.nodes, rounds=args.rounds, data_dir=args.data_dir or default_data_dir() / "demo",
        model=args.model, max_new_tokens=args.max_new_tokens,
    )


def _cmd_hardware(args: argparse.Namespace) -> int:
    from node import hardware

    info = hardware.detect()
    advice = hardware.recommend(info)
    if args.json:
        models = [asdict(fit) for fit in hardware.catalog_fits(info, advice)]
        print(json.dumps({"hardware": info.to_dict(), "recommendation": asdict(advice), "models": models}, indent=2))
        return 0
    print(info.describe())
    print(f"recommended: model {advice.model} on {advice.device}, train {advice.train_dtype}, "
          f"generate {advice.generation_dtype}, G={advice.num_generations} I={advice.local_questions} "
          f"J={advice.external_groups}, max_new_tokens={advice.max_new_tokens}, threads={advice.threads}")
    print(f"why: {advice.reason}")
    return 0


def _cmd_identity(args: argparse.Namespace) -> int:
    from node import identity

    path = args.identity_file or Path(args.data_dir or default_data_dir()) / "identity" / "swarm.key"
    if args.restore:
        peer = identity.restore(args.restore, path)
    else:
        peer = identity.load_or_create(path)
    if args.backup:
        identity.backup(peer, args.backup)
    if args.json:
        print(json.dumps({"peer_id": peer.peer_id, "name": peer.name, "path": str(peer.path)}))
    else:
        print(f"{peer.name} ({peer.peer_id})\nkey file {peer.path}")
        if args.backup:
            print(f"backed up to {args.backup}")
    return 0


def _cmd_invite(args: argparse.Namespace) -> int:
    path = Path(args.data_dir or default_data_dir()) / INVITE_FILE
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = None
    if not info or not psutil.pid_exists(int(info.get("pid", -1))):
        raise NodeError(
            "no node is running with this data folder, so there is no invite yet",
            hint="start one with `rl-swarm-node run` (a fixed --port keeps the invite stable across restarts)",
        )
    print(format_invite(info["swarm_name"], info["invite"]))
    return 0


# ------------------------------------------------------------------------------------------------------ parser
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rl-swarm-node", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="start a swarm, or join one with --join")
    run.add_argument("--config", type=Path, help="TOML config file ([training], [swarm], [tasks], [run])")
    run.add_argument("--join", action="append", metavar="INVITE",
                     help="an invite (rl-swarm:join?...) or multiaddr of a swarm member (repeatable)")
    run.add_argument("--swarm-name", help="swarm namespace on the DHT (default: local)")
    run.add_argument("--model", help="catalog id, Hub id, model folder, .gguf file, or 'bundled' (default)")
    run.add_argument("--device", choices=["auto", "cpu", "cuda", "mps"])
    run.add_argument("-I", "--local-questions", type=int, help="questions sampled locally per round")
    run.add_argument("-J", "--external-groups", type=int, help="peer groups trained on per round (0 = solo)")
    run.add_argument("-G", "--num-generations", type=int, help="completions per question")
    run.add_argument("--max-new-tokens", type=int)
    run.add_argument("--learning-rate", type=float)
    run.add_argument("--micro-batch-groups", type=int, help="groups per forward/backward pass (0 = all; less memory)")
    run.add_argument("--temperature", type=float, help="sampling temperature (default 1.0)")
    run.add_argument("--format-reward", type=float, help="bonus for a well-formed <answer> block (0..1)")
    run.add_argument("--families", help="comma-separated reasoning-gym families (default: the 9 SAPO families)")
    run.add_argument("--rounds", type=int, help="stop after this many rounds (default: until stopped)")
    run.add_argument("--checkpoint-every", type=int, help="rounds between checkpoints")
    run.add_argument("--gather-timeout", type=float, help="seconds to wait for peer groups per round")
    run.add_argument("--host", help="listen address (default 0.0.0.0)")
    run.add_argument("--port", type=int, help="listen port (default: any free port)")
    run.add_argument("--threads", type=int, help="CPU threads for torch (default: cores - 1)")
    run.add_argument("--gpu-memory-fraction", type=float)
    run.add_argument("--data-dir", type=Path, help=f"default {default_data_dir()}")
    run.add_argument("--run-name", help="run folder name under <data-dir>/runs (default: default)")
    run.add_argument("--identity-file", type=Path, help="peer key file (default <data-dir>/identity/swarm.key)")
    run.add_argument("--network", choices=["none", "gensyn-testnet", "local", "custom"], help="on-chain swarm (default none)")
    run.add_argument("--rpc-url", help="JSON-RPC URL of the chain (default: the network's)")
    run.add_argument("--coordinator", help="SwarmCoordinator contract address")
    run.add_argument("--wallet", help="wallet name (default: default)")
    run.add_argument("--events-jsonl", action="store_true", help="print typed events as JSON lines on stdout")
    run.add_argument("--control-stdin", action="store_true", help="accept pause/resume/stop lines on stdin")
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(handler=_cmd_run)

    demo = commands.add_parser("demo", help="a local swarm of 3 nodes on loopback with the bundled model")
    demo.add_argument("--nodes", type=int, default=3)
    demo.add_argument("--rounds", type=int, default=None, help="rounds per node (default: until Ctrl-C)")
    demo.add_argument("--model", default="bundled")
    demo.add_argument("--max-new-tokens", type=int, default=None, help="default: the demo's own (short answers)")
    demo.add_argument("--data-dir", type=Path, help="default <data dir>/demo")
    demo.set_defaults(handler=_cmd_demo)

    hw = commands.add_parser("hardware", help="what this machine has and what it should train")
    hw.add_argument("--json", action="store_true")
    hw.set_defaults(handler=_cmd_hardware)

    ident = commands.add_parser("identity", help="show (creating if needed), back up or restore the peer identity")
    ident.add_argument("--data-dir", type=Path)
    ident.add_argument("--identity-file", type=Path)
    ident.add_argument("--backup", type=Path, metavar="FILE", help="copy the identity key to FILE (owner-only)")
    ident.add_argument("--restore", type=Path, metavar="FILE", help="replace the identity key with FILE")
    ident.add_argument("--json", action="store_true")
    ident.set_defaults(handler=_cmd_identity)

    invite = commands.add_parser("invite", help="print the invite of the node running with this data folder")
    invite.add_argument("--data-dir", type=Path)
    invite.set_defaults(handler=_cmd_invite)

    cli_hub.add_commands(commands)  # upload, hf login|logout|whoami

    from node.cli_chain import add_commands as add_chain_commands

    add_chain_commands(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())
