"""A swarm member inside a netbed namespace: a real :class:`node.swarm.dht.DhtExchange` driven over stdin/stdout.

One JSON command per line in, one JSON answer per line out (``{"ok": ...}`` or ``{"error": ...}``). Commands:
``start`` (the exchange's options), ``publish`` / ``gather`` (a round), ``feed`` (rounds as a node plays them, in
the background: see :class:`Rounds`), ``report`` (what the rounds recorded), ``state``, ``stop``. Forked by
:meth:`tests.netbed.Netbed.member` into its host's network namespace, so every connection it makes goes through the
bed's network.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import sys
import threading
import time
from pathlib import Path

from node.import_gc import collector_off_while_importing

with collector_off_while_importing():  # hivemind brings torch: imported as a node process imports it (node run)
    from node.clock import SwarmClock
    from node.sapo.peer_buffer import PeerGroupBuffer
    from node.sapo.scoring import ScoredGroup, Verification
    from node.swarm.dht import DhtExchange
    from node.swarm.identity import load_or_create
    from node.swarm.records import RoundRecord, SharedGroup
    from node.tasks.taskref import TaskRef


def make_record(peer_id: str, round_: int, groups: int) -> RoundRecord:
    return RoundRecord(peer_id=peer_id, round=round_, groups=tuple(
        SharedGroup(task=TaskRef("basic_arithmetic", "0", round_, i), question=f"{peer_id[-6:]} r{round_} q{i}: 2+{i}?",
                    completions=tuple(f"<answer>{2 + i + k % 2}</answer>" for k in range(4)),
                    finished=(True,) * 4)
        for i in range(groups)
    ))


def accept(record: RoundRecord) -> Verification:
    """The verifier stand-in: every group is usable (the bed measures the exchange, not grading)."""
    group = record.groups[0]
    return Verification([ScoredGroup(record.peer_id, record.round, False, None, group.completions, group.finished,
                                     ())], [])


class Rounds:
    """Rounds as the node plays them since they stopped gathering: the exchange's feed fills a real
    :class:`PeerGroupBuffer` in the background; once every swarm round (``SwarmClock``), at a random moment of it,
    this member takes J groups from the buffer and publishes its own groups without waiting. Records when each of our
    rounds was published, when each peer group reached the buffer (the feed's ``offer``), and how long each ``take``
    and ``publish`` call held the round (what a round would wait)."""

    def __init__(self, exchange: DhtExchange, clock: SwarmClock, *, groups: int, take: int, poll_s: float,
                 max_age_s: float | None) -> None:
        self.exchange, self.clock, self.groups, self.take = exchange, clock, groups, take
        self.buffer = PeerGroupBuffer(clock, accept, drop_zero_advantage=False, max_age_s=max_age_s)
        self.buffer.start()
        self.published: dict[int, float] = {}  # swarm round -> when publish was called
        self.arrivals: list[list] = []  # [peer, round, index, unix time]
        self.rounds: list[dict] = []
        self.started = time.time()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        exchange.start_feed(self, clock, poll_s=poll_s)
        self._thread = threading.Thread(target=self._play, daemon=True)
        self._thread.start()

    # the feed's sink: a real buffer, with arrivals recorded
    def offer(self, record, *, published_at: float, size: int, network: str | None = None) -> bool:
        with self._lock:
            self.arrivals.append([record.peer_id, record.round, record.index, time.time()])
        return self.buffer.offer(record, published_at=published_at, size=size, network=network)

    def wants(self, peer_id: str, network: str | None = None) -> int:
        return self.buffer.max_per_peer  # record every group announced: the bed counts deliveries, not training

    def max_age_rounds(self) -> int:
        return self.buffer.max_age_rounds()

    def _play(self) -> None:
        rng, offsets = random.Random(0), random.Random()
        while not self._stop.is_set():
            round_ = self.clock.now()
            began = time.perf_counter()
            taken = self.buffer.take(self.take, rng)
            took = time.perf_counter() - began
            published_at = time.time()
            began = time.perf_counter()
            self.exchange.publish(make_record(self.exchange.peer_id, round_, self.groups), wait=False)
            handed = time.perf_counter() - began
            with self._lock:
                self.published.setdefault(round_, published_at)
                self.rounds.append({"round": round_, "take_s": took, "publish_s": handed,
                                    "taken": len(taken.chosen), "at": published_at})
            # one round per swarm round, at a random moment of it: a node's rounds are not aligned with the swarm's,
            # and a fixed phase against the feed's poll would make every delivery take the same time
            later = self.clock.start_of(round_ + 1) + offsets.uniform(0.05, 0.8 * self.clock.round_seconds)
            self._stop.wait(max(0.0, later - time.time()))

    def report(self) -> dict:
        with self._lock:
            return {"published": {str(r): t for r, t in self.published.items()}, "arrivals": list(self.arrivals),
                    "rounds": list(self.rounds), "started": self.started, "unconfirmed": self.exchange.unconfirmed()[0],
                    "timeouts": dict(self.exchange.timeouts)}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.buffer.stop()


def main() -> None:
    logging.basicConfig(level=logging.DEBUG if os.environ.get("NETBED_DEBUG") else logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    exchange: DhtExchange | None = None
    rounds: Rounds | None = None
    events: list[dict] = []
    for line in sys.stdin:
        command = json.loads(line)
        op = command.pop("op")
        try:
            if op == "start":
                identity = load_or_create(Path(command.pop("identity")))
                exchange = DhtExchange(identity, **command)
                exchange.report_reachability_to(lambda v, outside, local: events.append(
                    {**dataclasses.asdict(v), "addresses": outside, "local": local}))
                started = time.monotonic()
                exchange.start()
                result = {"peer_id": exchange.peer_id, "invite": exchange.invite(),
                          "seconds": time.monotonic() - started}
            elif op == "publish":
                result = exchange.publish(make_record(exchange.peer_id, command["round"], command.get("groups", 2)))
            elif op == "gather":
                started = time.monotonic()
                found = exchange.gather(command["round"])
                result = {"peers": sorted(r.peer_id for r in found.records), "seconds": time.monotonic() - started}
            elif op == "feed":
                clock = SwarmClock(command["epoch"], command["round_seconds"])
                rounds = Rounds(exchange, clock, groups=command.get("groups", 2), take=command.get("take", 2),
                                poll_s=command.get("poll_s", 1.0), max_age_s=command.get("max_age_s"))
                result = True
            elif op == "report":
                result = rounds.report()
            elif op == "stop_rounds":
                rounds.stop()
                result = rounds.report()
            elif op == "state":
                result = {"invite": exchange.invite(), "events": events, "client_mode": exchange.client_mode,
                          "contacts": exchange.contacts(), "connected": exchange.connected_peers()}
            elif op == "connections":  # each peer we hold a connection to, with its remote addresses
                infos = exchange._call("connections", lambda node: node.protocol.p2p.list_peers()) or []
                result = {str(info.peer_id): [str(a) for a in info.addrs] for info in infos}
            elif op == "stop":
                if rounds is not None:
                    rounds.stop()
                if exchange is not None:
                    exchange.shutdown()
                print(json.dumps({"ok": True}), flush=True)
                return
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as e:  # the test reads the error; the agent stays up for the next command
            logging.exception("command %s failed", op)
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
            continue
        print(json.dumps({"ok": result}), flush=True)


if __name__ == "__main__":
    main()
