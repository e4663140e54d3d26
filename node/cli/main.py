"""``rl-swarm-node``: run a swarm node, a local 3-node demo, or inspect hardware and invites."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import sys
import threading
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from node.cli import hub as cli_hub
from node.cli import remote as cli_remote
from node.cli import webhook as cli_webhook
from node.cli.event_output import add_event_options, event_stream
from node.clock import DEFAULT_EPOCH, DEFAULT_ROUND_SECONDS
from node.config import UNSET, NodeConfig, default_data_dir
from node.errors import NodeError
from node.swarm import admission as swarm_secret
from node.swarm.invite import format_invite, parse_invite

INVITE_FILE = "invite.json"
PORT_FILE = "listen_port"  # in the run folder: the port the node got last time it was given "any free port"


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
    from node.control_socket import ControlServer
    from node.events import EventBus, JsonLinesWriter, NodeStarted
    from node.import_gc import collector_off_while_importing
    from node.logs import setup_logging

    with collector_off_while_importing():  # torch, transformers, TRL, reasoning-gym: kept for the node's life
        from node.runner import SwarmNode

    config = keep_last_port(config_from_args(args))
    log_path = setup_logging(config.run_dir, verbose=args.verbose)
    private = admit(args, config)
    bus = EventBus()
    events = event_stream(args)
    if events is not None:
        bus.subscribe(JsonLinesWriter(events))
    else:
        bus.subscribe(_HumanProgress(log_path, private=private))
    invite_path = config.run.data_dir / INVITE_FILE

    def remember_invite(event) -> None:
        if isinstance(event, NodeStarted):
            remember_port(config, [a for a in event.invite if a.endswith(f"/p2p/{event.peer_id}")])
            invite_path.write_text(
                json.dumps({"pid": os.getpid(), "peer_id": event.peer_id, "swarm_name": event.swarm_name,
                            "game": event.game, "invite": event.invite, "swarm_epoch": event.swarm_epoch,
                            "round_seconds": event.round_seconds}),
                encoding="utf-8",
            )

    bus.subscribe(remember_invite)
    node = SwarmNode(config, bus=bus)
    # `rl-swarm-node attach` (and the app's fleet view, over SSH) watches and steers the node through this socket.
    control = ControlServer(config.run_dir, {"pause": node.pause, "resume": node.resume, "stop": node.stop}).start()
    bus.subscribe(control.publish)
    _stop_on_signals(node)
    if args.control_stdin:
        threading.Thread(target=_read_controls, args=(node,), name="controls", daemon=True).start()
    try:
        node.run()
    finally:
        invite_path.unlink(missing_ok=True)
        control.close()
    return 0


def admit(args: argparse.Namespace, config: NodeConfig) -> bool:
    """Store the admission secret an invite carries, make one for a new private swarm (--private) or forget the
    swarm's (--no-private); returns whether the swarm is private."""
    data_dir, swarm = config.run.data_dir, config.swarm.swarm_name
    invited = [invite.admission_secret for invite in map(parse_invite, args.join or []) if invite.admission_secret]
    if args.private is False:
        swarm_secret.forget(data_dir, swarm)
    elif invited:
        swarm_secret.remember(data_dir, swarm, invited[0])
    elif args.private:
        swarm_secret.create(data_dir, swarm)
    return swarm_secret.load(data_dir, swarm) is not None


def keep_last_port(config: NodeConfig) -> NodeConfig:
    """A node told to take any free port (0) takes the port of its last run again when that port is free: its
    address stays the same across a stop and start, so peers that know it (invites, demo peers, routing tables)
    find it again."""
    if config.swarm.port:
        return config
    try:
        port = int((config.run_dir / PORT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return config
    if not 0 < port <= 65535 or not _port_free(config.swarm.host, port):
        return config
    return config.update({"swarm": {"port": port}})


def remember_port(config: NodeConfig, invite: list[str]) -> None:
    """Keep the port this node listens on. ``invite``: our own addresses, those reachable from outside first (a
    router's mapped port, a relay's port) and our own network's last, so the last direct one has the listen port."""
    ports = [int(match.group(1)) for address in invite
             if "/p2p-circuit" not in address and (match := re.search(r"/tcp/(\d+)", address))]
    if ports:
        ports = {ports[-1]}
    if len(ports) == 1:
        config.run_dir.mkdir(parents=True, exist_ok=True)
        (config.run_dir / PORT_FILE).write_text(str(ports.pop()), encoding="utf-8")


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a just-stopped node leaves TIME_WAIT behind
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


class _HumanProgress:
    def __init__(self, log_path: Path, *, private: bool = False) -> None:
        self.log_path = log_path
        self.private = private

    def __call__(self, event) -> None:
        kind = event.kind
        if kind == "node_started":
            print(f"peer {event.peer_name} ({event.peer_id}) on {event.device}, model {event.model}")
            print(f"run folder {event.run_dir}; log {self.log_path}")
            if event.resumed_from_round is not None:
                print(f"resumed after round {event.resumed_from_round}")
            if self.private:  # stdout may be a service's log: the secret is printed only on request
                print("this swarm is private: `rl-swarm-node invite` prints its invite, which carries the swarm's "
                      "secret; share it like a password")
            else:
                invite = format_invite(event.swarm_name, event.invite, event.game,
                                       swarm_epoch=event.swarm_epoch, round_seconds=event.round_seconds)
                print(f"others join this swarm by pasting this invite into the app, or with\n"
                      f"  rl-swarm-node run --join '{invite}'")
        elif kind == "round_finished":
            external = "-" if event.reward_external is None else f"{event.reward_external:.3f}"
            lacked = "" if event.peer_groups_spread_we_lacked is None else \
                f" ({event.peer_groups_spread_we_lacked} with spread ours lacked)"
            print(
                f"round {event.round:>5} | reward local {event.reward_local:.3f} ext {external} | "
                f"loss {event.loss:+.4f} | peers {event.peers_seen} | groups shared {event.groups_shared} "
                f"received {event.groups_received} used {event.groups_used}/{event.external_groups_wanted}{lacked} "
                f"rejected {event.groups_rejected} | "
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
        elif kind == "reachability":
            print(f"{event.summary}. {event.advice}", flush=True)
        elif kind == "resource_limit":
            print(f"[{event.summary or 'full speed again'}]", flush=True)


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
    actions = {"pause": node.pause, "resume": node.resume, "stop": node.stop, "cancel": node.stop,
               "checkpoint": node.request_checkpoint}
    for line in sys.stdin:
        action = actions.get(line.strip().lower())
        if action:
            action()
    node.stop()  # the supervisor went away


# The `run` flags are generated from the config fields of these sections: --<field-name>, typed, with the field's
# description, bounds and default as help. A few fields also keep the short or older names users know.
FLAG_SECTIONS = ("training", "swarm", "evaluation", "run", "chain")
FLAG_PREFIXES = {"evaluation": "eval-"}  # --eval-seed is not --seed ([run] seed)
FLAG_NAMES: dict[tuple[str, str], tuple[str, ...]] = {
    ("training", "local_questions"): ("-I",),
    ("training", "external_groups"): ("-J",),
    ("training", "num_generations"): ("-G",),
    ("training", "format_reward_weight"): ("--format-reward",),
    ("swarm", "gather_timeout_s"): ("--gather-timeout",),
}
NOT_FLAGS = {("swarm", "initial_peers")}  # --join takes invites, not bare addresses


@dataclass(frozen=True)
class ConfigFlag:
    section: str
    field: str
    names: tuple[str, ...]
    kwargs: dict[str, Any]

    @property
    def dest(self) -> str:
        return f"{self.section}__{self.field}"


def config_flags() -> list[ConfigFlag]:
    """One flag per scalar or list-of-strings field of :data:`FLAG_SECTIONS` (tables live in the config file)."""
    flags = []
    for section in FLAG_SECTIONS:
        model = NodeConfig.model_fields[section].annotation
        for name, info in model.model_fields.items():
            if (section, name) in NOT_FLAGS:
                continue
            kwargs = _flag_kwargs(info)
            if kwargs is None:
                continue
            names = (*FLAG_NAMES.get((section, name), ()), flag_name(section, name))
            flags.append(ConfigFlag(section, name, names, kwargs))
    return flags


def flag_name(section: str, field: str) -> str:
    return "--" + FLAG_PREFIXES.get(section, "") + field.replace("_", "-")


def _flag_kwargs(info) -> dict[str, Any] | None:
    annotation = info.annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
    kwargs: dict[str, Any] = {}
    if typing.get_origin(annotation) is typing.Literal:
        kwargs["choices"] = list(typing.get_args(annotation))
    elif annotation is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif annotation in (int, float, str, Path):
        kwargs["type"] = annotation
    elif typing.get_origin(annotation) is list and typing.get_args(annotation) == (str,):
        kwargs.update(type=str, nargs="*")
    else:
        return None
    bounds = [f"{symbol} {getattr(rule, attr)}" for rule in info.metadata
              for attr, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")) if hasattr(rule, attr)]
    default = info.get_default(call_default_factory=True)
    parts = [info.description or "", ", ".join(bounds), f"default: {'automatic' if default is None else default}"]
    kwargs["help"] = "; ".join(part for part in parts if part).replace("%", "%%")
    return kwargs


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    for flag in config_flags():
        metavar = {} if "choices" in flag.kwargs or "action" in flag.kwargs else {"metavar": flag.field.upper()}
        parser.add_argument(*flag.names, dest=flag.dest, default=UNSET, **metavar, **flag.kwargs)


def config_from_args(args: argparse.Namespace) -> NodeConfig:
    changes: dict[str, dict[str, Any]] = {section: {} for section in (*FLAG_SECTIONS, "tasks")}
    for flag in config_flags():
        changes[flag.section][flag.field] = getattr(args, flag.dest, UNSET)
    peers: list[str] = []
    invited_swarm = invited_game = invited_clock = None
    for text in args.join or []:
        invite = parse_invite(text)
        peers += invite.peers
        invited_swarm = invited_swarm or invite.swarm_name
        invited_game = invited_game or invite.game
        invited_clock = invited_clock or invite.clock
    if peers:
        changes["swarm"]["initial_peers"] = peers
    if invited_swarm and changes["swarm"]["swarm_name"] is UNSET:
        changes["swarm"]["swarm_name"] = invited_swarm
    if invited_game:  # the invite says which game its swarm plays
        given = changes["swarm"].get("game", UNSET)
        if given is not UNSET and given != invited_game:
            raise NodeError(
                f"--game {given} contradicts the invite, whose swarm plays {invited_game}",
                hint="leave out --game when joining with an invite: the invite says which game its swarm plays",
            )
        changes["swarm"]["game"] = invited_game
    if invited_clock is not None:  # the swarm's clock: every member must derive the same rounds
        changes["swarm"]["swarm_epoch"] = invited_clock.epoch
        changes["swarm"]["round_seconds"] = invited_clock.round_seconds
    if args.families:
        changes["tasks"]["weights"] = {family: 1.0 for family in args.families.split(",")}
    if args.config:
        return NodeConfig.load(args.config, changes)
    return NodeConfig.build().update(changes, source="command line")


# ---------------------------------------------------------------------------------------------- other commands
def _cmd_demo(args: argparse.Namespace) -> int:
    from node.cli.demo import run_demo

    return run_demo(
        nodes=args.nodes, rounds=args.rounds, data_dir=args.data_dir or default_data_dir() / "demo",
        model=args.model, max_new_tokens=args.max_new_tokens,
    )


def _cmd_hardware(args: argparse.Namespace) -> int:
    from node.api import Hardware, HardwareReport
    from node.learning import hardware

    info = hardware.detect()
    advice = hardware.recommend(info)
    if args.json:
        report = HardwareReport(Hardware.from_json(info.to_dict()), advice, hardware.catalog_fits(info, advice))
        print(json.dumps(report.to_json(), indent=2))
        return 0
    print(info.describe())
    print(f"recommended: model {advice.model} on {advice.device}, train {advice.train_dtype}, "
          f"generate {advice.generation_dtype}, G={advice.num_generations} I={advice.local_questions} "
          f"J={advice.external_groups}, max_new_tokens={advice.max_new_tokens}, threads={advice.threads}")
    print(f"why: {advice.reason}")
    return 0


def _cmd_identity(args: argparse.Namespace) -> int:
    from node.swarm import identity

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
    secret = swarm_secret.load(path.parent, info["swarm_name"])
    print(format_invite(info["swarm_name"], info["invite"], info.get("game", "sapo"), secret,
                        info.get("swarm_epoch", DEFAULT_EPOCH), info.get("round_seconds", DEFAULT_ROUND_SECONDS)))
    return 0


# ------------------------------------------------------------------------------------------------------ parser
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rl-swarm-node", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="start a swarm, or join one with --join")
    run.add_argument("--config", type=Path, help="TOML config file ([training], [swarm], [tasks], [run])")
    run.add_argument("--join", action="append", metavar="INVITE",
                     help="an invite (rl-swarm:join?...) or multiaddr of a swarm member (repeatable)")
    run.add_argument("--families", help="comma-separated reasoning-gym families (default: the 9 SAPO families)")
    run.add_argument("--private", action=argparse.BooleanOptionalAction,
                     help="start a private swarm: only nodes given its invite (which carries a secret) are heard; "
                     "--no-private forgets the swarm's secret (a node that joined with an invite keeps it)")
    add_config_flags(run)  # every scalar setting of [training], [swarm], [evaluation], [run] and [chain]
    add_event_options(run)
    run.add_argument("--control-stdin", action="store_true", help="accept pause/resume/stop/cancel/checkpoint lines on stdin")
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
    cli_webhook.add_commands(commands)  # webhook set|clear|show|test
    cli_remote.add_commands(commands)  # attach, start, stop, logs: a headless node seen from elsewhere

    from node.cli.chain import add_commands as add_chain_commands

    add_chain_commands(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())
