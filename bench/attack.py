"""Hostile peers, measured: two honest node processes train N rounds without and with the adversary of
tests/test_swarm_adversary_training.py, with the same settings and seeds, and a node restarted after each run.

Each honest node and the adversary have a network of their own (three /24s of the loopback). The adversary announces
far-future rounds, publishes for a round out of reach, floods every round it sees with groups from many free
identities (an honest task and question; ``payload``: a payload in an answer block before the graded one;
``replay``: the honest group's own completions, valid and verified like any other) and stuffs junk keys with long
expiry. Per condition the bench reports rounds finished vs asked, gather and round seconds, peak RSS of each honest
node (the node process with its children except the p2p daemon; the daemon separately), peer groups trained on,
rejected groups by reason (from each run's metrics.jsonl), the rounds in which each honest node received the
other's groups and the share of its J slots the adversary's identities took (from samples.jsonl), what it stored
for the swarm and whether its own entries were all stored (from its node.log), the highest round played and whether a
node restarted afterwards started and played a round. It uses the tiny random model, so a round costs seconds and
the time measured is the swarm's, not the model's::

    PYTHONPATH=. python bench/attack.py --rounds 6 --identities 150
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from node.events import RolloutSample, RoundFinished  # noqa: E402
from node.logs import LOG_FILE  # noqa: E402
from node.runstore import RunStore  # noqa: E402
from node.sapo.scoring import NO_SIGNAL, TRAINED, UPDATE_SKIPPED  # noqa: E402
from node.swarm.dht import DhtExchange  # noqa: E402
from node.swarm.identity import load_or_create  # noqa: E402
from tests.nodes import NodeProcess  # noqa: E402
from tests.test_swarm_adversary_training import HOSTS, Adversary, _config, hidden_payload, replay  # noqa: E402

RESULTS = REPO / "bench" / "results" / "attack.json"
NODE_TIMEOUT_S = 600
RSS_EVERY_S = 0.5
DAEMON = "p2pd"
FORGES = {"payload": hidden_payload, "replay": replay}
NETWORKS = {name: str(ipaddress.ip_network(f"{host}/24", strict=False)) for name, host in HOSTS.items()}
_STORAGE_LINE = re.compile(r"Swarm storage: (\d+) bytes held for the swarm, at most (\d+) from one address group "
                           r"and (\d+) from one signer; refused (\{.*?\}), from (\{.*?\});")
_NOT_STORED_LINE = re.compile(r"Round (\d+): (\d+) of (\d+) entries not stored|Round (\d+) groups were not stored")


class PeakRss:
    """Samples a process tree until stopped: peak RSS of the node with its children except the p2p daemon, and of
    the daemon(s) alone, so that the daemon's buffers under a flood show apart from the Python node's."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.node_mb = 0.0
        self.daemon_mb = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(RSS_EVERY_S):
            try:
                root = psutil.Process(self.pid)
                tree = [root, *root.children(recursive=True)]
                node = daemon = 0
                for process in tree:
                    rss = process.memory_info().rss
                    if process.name() == DAEMON:
                        daemon += rss
                    else:
                        node += rss
            except psutil.Error:  # the node exited, or a child came and went between listing and reading
                continue
            self.node_mb = max(self.node_mb, node / 2**20)
            self.daemon_mb = max(self.daemon_mb, daemon / 2**20)

    def finish(self) -> dict:
        self.stop.set()
        self.thread.join(10)
        return {"node_mb": round(self.node_mb, 1), "p2pd_mb": round(self.daemon_mb, 1)}


def summarize(metrics: list[RoundFinished], asked: int) -> dict:
    """One honest node's rounds, from its metrics.jsonl."""

    def spread(values: list[float]) -> dict:
        if not values:
            return {"p50": None, "p95": None, "max": None}
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        return {"p50": round(statistics.median(ordered), 2), "p95": round(p95, 2), "max": round(ordered[-1], 2)}

    rejected: Counter[str] = Counter()
    for row in metrics:
        rejected.update(row.rejected_reasons)
    return {
        "gather_s_by_round": {row.round: round(row.seconds_gather, 2) for row in metrics},
        "rounds_finished": len(metrics), "rounds_asked": asked, "rounds_lost": max(0, asked - len(metrics)),
        "gather_s": spread([row.seconds_gather for row in metrics]),
        "round_s": spread([row.seconds_total for row in metrics]),
        "groups_used": sum(row.groups_used for row in metrics),
        "groups_received": sum(row.groups_received for row in metrics),
        "rejected": dict(sorted(rejected.items())),
        "max_round": max((row.round for row in metrics), default=None),
    }


def exchange(samples: list[RolloutSample], me: str, other: str, adversary: set[str], slots: int) -> dict:
    """Whose groups one honest node received and trained on: rounds in which it received the other honest node's,
    and the share of its J slots (J x rounds) the adversary's identities took."""
    external = [s for s in samples if not s.local]
    rounds = sorted({s.round for s in samples if s.local})
    with_other = sorted({s.round for s in external if s.source_peer == other})
    from_adversary = [s for s in external if s.source_peer in adversary]
    # given to the update, whatever it made of them (a random model's equal rewards skip the update)
    trained = [s for s in external if s.fate in (TRAINED, NO_SIGNAL, UPDATE_SKIPPED)]
    # Rounds never wait: those before the feed brought any peer group (nobody had published yet) cannot receive one
    fed = [r for r in rounds if external and r >= min(s.round for s in external)]
    return {
        "rounds_receiving_other": len(with_other), "rounds_played": len(rounds),
        "rounds_since_first_peer_group": len(fed),
        "rounds_receiving_other_since_first_peer_group": sum(r in fed for r in with_other),
        "groups_received": {"other": sum(s.source_peer == other for s in external), "adversary": len(from_adversary)},
        "slots": slots,
        "slots_taken": {"other": sum(s.source_peer == other for s in trained),
                        "adversary": sum(s.source_peer in adversary for s in trained)},
        "adversary_slot_share": round(sum(s.source_peer in adversary for s in trained) / slots, 3) if slots else None,
        "me": me,
    }


def storage(log: str, networks: dict[str, str]) -> dict:
    """What the node stored for the swarm (its per-round log line): bytes at most, entries it refused by reason and
    by the network that sent them (``networks``: name -> address group, e.g. the other honest node's), and the
    rounds in which one of its own entries was not confirmed by every replica (the adversary's node is a replica)."""
    lines = list(_STORAGE_LINE.finditer(log))
    last = lines[-1] if lines else None
    refused_from = json.loads(last.group(5)) if last else {}
    return {"max_bytes": max((int(m.group(1)) for m in lines), default=None),
            "max_from_one_address_group": max((int(m.group(2)) for m in lines), default=None),
            "max_from_one_signer": max((int(m.group(3)) for m in lines), default=None),
            "refused": json.loads(last.group(4)) if last else {},
            "refused_from": {name: refused_from.get(group, 0) for name, group in networks.items()},
            "rounds_with_own_entry_unconfirmed": len(_NOT_STORED_LINE.findall(log))}


def run_condition(model: str, work: Path, *, rounds: int, attack: str | None, identities: int) -> dict:
    configs = {"a": _config(model, work / "a", rounds=rounds, host=HOSTS["a"])}
    a = NodeProcess(configs["a"], name="a")
    a.send("pause")
    nodes, samplers, adversary, attacker = [a], {}, None, None
    started_at = time.monotonic()
    try:
        started_a = a.wait_for(lambda e: e.kind == "node_started")
        invite = started_a.invite
        configs["b"] = _config(model, work / "b", rounds=rounds, join=invite, host=HOSTS["b"])
        b = NodeProcess(configs["b"], name="b")
        b.send("pause")
        nodes.append(b)
        ids = [started_a.peer_id, b.wait_for(lambda e: e.kind == "node_started").peer_id]
        for node in nodes:
            node.wait_for(lambda e: e.kind == "state_changed" and e.state == "paused")
        if attack:
            attacker = DhtExchange(load_or_create(work / "attacker.key"), swarm_name="test", host=HOSTS["attacker"],
                                   initial_peers=invite, groups_wanted=1, call_timeout=5.0)
            attacker.start()
            adversary = Adversary(attacker, ids, identities=identities, forge=FORGES[attack])
            adversary.thread.start()
        samplers = {n.name: PeakRss(n.pid) for n in nodes}
        for node in nodes:
            node.send("resume")
        for node in nodes:
            node.finish(timeout=NODE_TIMEOUT_S)
    finally:
        if adversary is not None:
            adversary.stop.set()
            adversary.thread.join(60)
        if attacker is not None:
            attacker.shutdown()
        for node in nodes:
            if node.process.poll() is None:
                node.kill_tree()
    result = {"attack": attack or "none", "seconds": round(time.monotonic() - started_at, 1), "nodes": {}}
    hostile = set() if adversary is None else {peer for _, peer in adversary.identities} | {attacker.peer_id}
    peers = dict(zip(("a", "b"), ids, strict=False))
    for node in nodes:
        store = RunStore(configs[node.name].run_dir)
        other = peers["b" if node.name == "a" else "a"]
        slots = configs[node.name].training.external_groups * len(store.metrics())
        result["nodes"][node.name] = (summarize(store.metrics(), rounds)
                                      | {"exchange": exchange(store.samples(), peers[node.name], other, hostile, slots),
                                         "storage": storage((configs[node.name].run_dir / LOG_FILE)
                                                            .read_text(errors="replace"), NETWORKS),
                                         "peak_rss": samplers[node.name].finish() if node.name in samplers else None,
                                         "exit_code": node.returncode})
    if adversary is not None:
        result["adversary"] = {"identities": identities, "rounds_flooded": sorted(adversary.rounds_flooded)}
    result["restart"] = restart(model, work, rounds=rounds)
    return result


def restart(model: str, work: Path, *, rounds: int) -> dict:
    """Node a again, alone, asked for one more round: it must start from its checkpoint and play that round."""
    again = NodeProcess(_config(model, work / "a", rounds=rounds + 1), name="a-again")
    started = None
    try:
        started = again.wait_for(lambda e: e.kind == "node_started")
        again.finish(timeout=NODE_TIMEOUT_S)
    except AssertionError:  # it did not start: that is the finding, reported below
        pass
    finally:
        if again.process.poll() is None:
            again.kill_tree()
    return {"started": started is not None, "resumed_from_round": started and started.resumed_from_round,
            "rounds_played": len(again.events_of("round_finished")), "exit_code": again.returncode}


def table(results: list[dict]) -> str:
    """Markdown: one row per (condition, honest node)."""
    lines = ["| condition | node | rounds (lost) | gather s p50 / p95 / max | round s p50 / max "
             "| peak RSS node / p2pd MB | peer groups used / received | rejected | max round "
             "| rounds receiving the other's groups | J slots taken by the adversary "
             "| stored for the swarm MB (largest address group / signer) | entries refused from a / b / adversary "
             "| restart: started, rounds played |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for result in results:
        condition = result["attack"]
        restart_ = result["restart"]
        for name, node in result["nodes"].items():
            gather, round_s, rss = node["gather_s"], node["round_s"], node["peak_rss"] or {}
            rejected = ", ".join(f"{k} {v}" for k, v in node["rejected"].items()) or "none"
            again = f"{'yes' if restart_['started'] else 'no'}, {restart_['rounds_played']}" if name == "a" else ""
            swap, held = node.get("exchange", {}), node.get("storage", {})
            taken = swap.get("slots_taken", {}).get("adversary")
            mb = [f"{held[k] / 2**20:.2f}" if held.get(k) is not None else "-"
                  for k in ("max_bytes", "max_from_one_address_group", "max_from_one_signer")]
            lines.append(
                f"| {condition} | {name} | {node['rounds_finished']}/{node['rounds_asked']} ({node['rounds_lost']}) "
                f"| {gather['p50']} / {gather['p95']} / {gather['max']} | {round_s['p50']} / {round_s['max']} "
                f"| {rss.get('node_mb')} / {rss.get('p2pd_mb')} | {node['groups_used']} / {node['groups_received']} "
                f"| {rejected} | {node['max_round']} "
                f"| {swap.get('rounds_receiving_other')}/{swap.get('rounds_played')} "
                f"| {taken}/{swap.get('slots')} | {mb[0]} ({mb[1]} / {mb[2]}) "
                f"| {' / '.join(str(held.get('refused_from', {}).get(n, '-')) for n in ('a', 'b', 'attacker'))} "
                f"| {again} |")
    return "\n".join(lines)


def tiny_model(work: Path) -> str:
    from node.learning import models  # torch loads in this process only to build the model
    from tests.tiny_model import tiny_random

    return str(tiny_random(models.resolve(models.BUNDLED), work / "tiny-model"))


def summary(runs: list[list[dict]]) -> list[dict]:
    """Per condition and honest node, over the runs: median and range of what the issue's targets name."""
    figures = {
        "rounds_receiving_other_share": lambda n: n["exchange"]["rounds_receiving_other"] / max(1, n["exchange"]
                                                                                                 ["rounds_played"]),
        "rounds_receiving_other_share_once_fed": lambda n: (
            n["exchange"]["rounds_receiving_other_since_first_peer_group"]
            / max(1, n["exchange"]["rounds_since_first_peer_group"])),
        "adversary_slot_share": lambda n: n["exchange"]["adversary_slot_share"],
        "stored_mb": lambda n: (n["storage"]["max_bytes"] or 0) / 2**20,
        "largest_address_group_mb": lambda n: (n["storage"]["max_from_one_address_group"] or 0) / 2**20,
        "entries_refused_from_honest_networks": lambda n: n["storage"]["refused_from"]["a"]
        + n["storage"]["refused_from"]["b"],
        "gather_s_p50": lambda n: n["gather_s"]["p50"],
        "max_round": lambda n: n["max_round"],
    }
    rows = []
    for index, condition in enumerate(runs[0]):
        for name in condition["nodes"]:
            row = {"attack": condition["attack"], "node": name}
            for figure, of in figures.items():
                values = [of(run[index]["nodes"][name]) for run in runs if name in run[index]["nodes"]]
                values = [v for v in values if v is not None]
                row[figure] = ({"median": round(statistics.median(values), 3), "min": round(min(values), 3),
                                "max": round(max(values), 3)} if values else None)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--identities", type=int, default=150, help="sybil identities the adversary floods with")
    parser.add_argument("--attacks", default="none,payload,replay",
                        help="conditions, in order: none, payload (a payload in an answer block nobody grades), "
                        "replay (honest groups replayed under the adversary's identities)")
    parser.add_argument("--runs", type=int, default=1, help="repeats of every condition (the file is rewritten after "
                        "each, with the median and range so far)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    runs: list[list[dict]] = []
    loads = [round(os.getloadavg()[0], 1)]
    with tempfile.TemporaryDirectory(prefix="attack-bench-") as tmp:
        work = Path(tmp)
        model = tiny_model(work)
        for run in range(args.runs):
            results = []
            for attack in args.attacks.split(","):
                print(f"run {run + 1}/{args.runs}, adversary: {attack}, {args.rounds} rounds", flush=True)
                results.append(run_condition(model, work / f"{run}-{attack}", rounds=args.rounds,
                                             attack=None if attack == "none" else attack,
                                             identities=args.identities))
            runs.append(results)
            loads.append(round(os.getloadavg()[0], 1))
            report = {"bench": "attack", "model": "tiny random (2 layers, hidden 64)", "rounds": args.rounds,
                      "machine": {"cpus": psutil.cpu_count(), "platform": platform.platform(),
                                  "load_average_1min": loads,
                                  "note": "shared with other engineers' test runs while measured: times are noisy"},
                      "identities": args.identities, "networks": NETWORKS,
                      "rss": "node = the node process and its children except p2pd; p2pd = the p2p daemon alone",
                      "summary": summary(runs), "runs": runs}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=2) + "\n")
            print(table(results), flush=True)


if __name__ == "__main__":
    main()
