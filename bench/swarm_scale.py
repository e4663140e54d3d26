"""Per-node cost of the swarm protocol as the swarm grows: lightweight peers (real p2pd + DHT + records, no model).

For each N, N peers join on loopback (each through a random earlier peer), then play rounds: every peer publishes a
full-size record (8 groups x 8 completions x ~1.2 KB) and announces its round, then every peer gathers J groups
(calling ``gather`` again, as the node does, until J groups are in or 2 s passed) and reads the round clock. In the
last round 20 % of the peers are killed (their p2pd SIGKILLed) between publishing and gathering.

Measured per N: bytes of DHT entries each node received per round (records, pointers, clock entries: what the
protocol makes a node download) and all bytes its p2pd read (that plus replicas others stored on it, routing, RPC
framing, and what we sent through it), gather latency p50/p95 for J groups, publish latency, memory per peer (process +
p2pd RSS over N), failed gathers (fewer than J groups) and timed-out calls.

    nice -n 10 python bench/swarm_scale.py --peers 2 8 16 32 64 --rounds 3 --out bench/results/swarm_scale.json

All peers of one N share this process (one DHT loop thread each) and its GIL, on a machine shared with other
work: latencies are upper bounds. The load average is recorded with the results.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from node.errors import NodeError  # noqa: E402
from node.swarm.dht import DhtExchange  # noqa: E402
from node.swarm.identity import load_or_create  # noqa: E402
from node.swarm.records import GroupRecord, RoundRecord, SharedGroup, encode_group_record  # noqa: E402
from node.tasks.taskref import TaskRef  # noqa: E402

J = 8
GROUPS, COMPLETIONS, COMPLETION_CHARS = 8, 8, 1200
GATHER_DEADLINE_S = 2.0
KILLED_FRACTION = 0.2
WORDS = "the of and to in is that for it as with we so then first next step answer total number value".split()


def text(rng: random.Random, n: int) -> str:
    out = []
    while sum(len(w) + 1 for w in out) < n:
        out.append(rng.choice(WORDS) if rng.random() < 0.8 else str(rng.randint(0, 999)))
    return " ".join(out)[:n]


def full_record(peer_id: str, round_: int) -> RoundRecord:
    rng = random.Random(f"{peer_id}/{round_}")
    return RoundRecord(
        peer_id=peer_id, round=round_,
        groups=tuple(
            SharedGroup(
                task=TaskRef("basic_arithmetic", "3fa2c1", round_, i),
                question=text(rng, 300),
                completions=tuple(text(rng, COMPLETION_CHARS) for _ in range(COMPLETIONS)),
                finished=(True,) * COMPLETIONS,
            )
            for i in range(GROUPS)
        ),
    )


def daemon_read(swarm: DhtExchange) -> int:
    """Bytes the peer's p2pd read: from the network (replicas stored on us, routing, framing) and from us."""
    try:
        return swarm._daemon.io_counters().read_chars
    except (psutil.Error, AttributeError):
        return 0


def rss_of(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.Error:
        return 0


def run_size(n: int, rounds: int, folder: Path, pool: ThreadPoolExecutor, on_row: Callable[[dict], None]) -> None:
    me = psutil.Process()
    rss_before = rss_of(me)
    peers: list[DhtExchange] = []
    started = time.monotonic()
    for i in range(n):
        bootstrap = random.choice(peers).invite() if peers else ()
        swarm = DhtExchange(load_or_create(folder / f"p{i}.key"), swarm_name=f"bench{n}", host="127.0.0.1",
                      initial_peers=bootstrap, call_timeout=10.0, groups_wanted=J)
        swarm.start()
        peers.append(swarm)
    join_s = time.monotonic() - started
    try:
        for round_ in range(1, rounds + 1):
            killing = round_ == rounds and n >= 5
            alive = [p for p in peers if p._node is not None]
            before = {id(p): p.traffic.copy() for p in alive}
            io_before = {id(p): daemon_read(p) for p in alive}

            def publish(swarm: DhtExchange) -> float:
                t0 = time.monotonic()
                ok = swarm.publish(full_record(swarm.peer_id, round_))
                return time.monotonic() - t0 if ok else float("nan")

            publish_s = list(pool.map(publish, alive))
            killed = []
            if killing:
                killed = random.sample(alive, max(1, round(KILLED_FRACTION * len(alive))))
                for victim in killed:
                    victim._daemon.kill()  # a crash: its p2pd vanishes mid-round, nothing says goodbye
                alive = [p for p in alive if p not in killed]

            def gather(swarm: DhtExchange) -> tuple[float, int]:
                t0 = time.monotonic()
                got = 0
                while True:
                    got = len(swarm.gather(round_).records)
                    if got >= min(J, n - 1) or time.monotonic() - t0 > GATHER_DEADLINE_S:
                        break
                    time.sleep(0.1)
                return time.monotonic() - t0, got

            gathered = list(pool.map(gather, alive))
            received = [p.traffic["received_bytes"] - before[id(p)]["received_bytes"] for p in alive]
            lookups = [p.traffic["lookups"] - before[id(p)]["lookups"] for p in alive]
            times = sorted(t for t, _ in gathered)
            wanted = min(J, n - 1)
            sample = full_record("x", round_)
            j_bytes = sum(len(encode_group_record(GroupRecord("x" * 52, round_, i, g)))
                          for i, g in enumerate(sample.groups[:wanted]))
            rss_total = rss_of(me) - rss_before + sum(rss_of(p._daemon) for p in alive if p._daemon)
            row = {
                "peers": n,
                "round": round_,
                "killed_fraction": round(len(killed) / n, 3),
                "bytes_received_per_node_round": int(statistics.mean(received)),
                "daemon_bytes_read_per_node_round": int(statistics.mean(daemon_read(p) - io_before[id(p)] for p in alive)),
                "j_groups_bytes": j_bytes,
                "lookups_per_node_round": round(statistics.mean(lookups), 1),
                "gather_p50_s": round(times[len(times) // 2], 3),
                "gather_p95_s": round(times[min(len(times) - 1, int(0.95 * len(times)))], 3),
                "publish_p50_s": round(statistics.median(t for t in publish_s if t == t) if any(t == t for t in publish_s) else -1, 3),
                "publish_failed": sum(1 for t in publish_s if t != t),
                "gathers_short_of_j": sum(1 for _, got in gathered if got < wanted),
                "timeouts": sum(sum(p.timeouts.values()) for p in alive),
                "memory_per_peer_mb": round(rss_total / len(alive) / 2**20, 1),
                "join_s": round(join_s, 1),
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }
            print(json.dumps(row), flush=True)
            on_row(row)  # written at once: whatever happens while stopping, the rows measured are on disk
    finally:
        # each shutdown is bounded (a crashed daemon is not waited for); side by side, N of them cost about one
        with ThreadPoolExecutor(max(1, len(peers))) as stoppers:
            list(stoppers.map(DhtExchange.shutdown, peers))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=int, nargs="+", default=[2, 8, 16, 32, 64])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results/swarm_scale.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    random.seed(0)
    rows, stopped = [], None

    def on_row(row: dict) -> None:
        rows.append(row)
        write(args, rows, stopped)

    with ThreadPoolExecutor(8) as pool:
        for n in args.peers:
            if psutil.virtual_memory().available < n * 100 * 2**20 + 2 * 2**30:
                stopped = f"stopped before N={n}: {n} peers need ~{n * 100} MiB, less is available"
                break
            try:
                with tempfile.TemporaryDirectory() as folder:
                    run_size(n, args.rounds, Path(folder), pool, on_row)
            except NodeError as e:  # a daemon that cannot start on a loaded machine: say so, keep what was measured
                stopped = f"N={n}: a peer could not join ({e.message}), load average {os.getloadavg()[0]:.1f}"
                break
    write(args, rows, stopped)


def write(args: argparse.Namespace, rows: list[dict], stopped: str | None) -> None:
    result = {
        "rows": rows,
        "j": J,
        "record": {"groups": GROUPS, "completions": COMPLETIONS, "completion_chars": COMPLETION_CHARS},
        "cpu_count": os.cpu_count(),
        "stopped": stopped,
        "command": "nice -n 10 python bench/swarm_scale.py --peers " + " ".join(map(str, args.peers))
        + f" --rounds {args.rounds}",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
