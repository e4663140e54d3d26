"""A swarm member inside a netbed namespace: a real :class:`node.swarm.dht.DhtExchange` driven over stdin/stdout.

One JSON command per line in, one JSON answer per line out (``{"ok": ...}`` or ``{"error": ...}``). Commands:
``start`` (the exchange's options), ``publish`` / ``gather`` (a round), ``state``, ``stop``. Started by
:class:`tests.netbed.Netbed` with ``ip netns exec``, so every connection it makes goes through the bed's network.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path

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


def main() -> None:
    logging.basicConfig(level=logging.DEBUG if os.environ.get("NETBED_DEBUG") else logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    exchange: DhtExchange | None = None
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
            elif op == "state":
                result = {"invite": exchange.invite(), "events": events, "client_mode": exchange.client_mode,
                          "contacts": exchange.contacts(), "connected": exchange.connected_peers()}
            elif op == "connections":  # each peer we hold a connection to, with its remote addresses
                infos = exchange._call("connections", lambda node: node.protocol.p2p.list_peers()) or []
                result = {str(info.peer_id): [str(a) for a in info.addrs] for info in infos}
            elif op == "stop":
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
