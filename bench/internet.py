"""Swarm members behind home routers on a simulated internet (tests/netbed.py), against the same members on loopback.

Each member is a real DhtExchange (tests/netbed_peer.py) in its own network namespace. Per round every member
publishes its groups, then gathers until it holds a group of every other member or ``--gather-timeout`` passes;
the gather time is how long that took. Scenarios (issue 27):

1. a public member starts the swarm, two home members (NAT, no UPnP) join with its invite;
2. a home member joins a public one and is reached through its relay; a friend at another home joins with the
   home member's invite (its relay circuit) alone;
3. the same with UPnP on the first home's router: the friend joins through the mapped port;
4. eight members, six of them at home, one home link capped at 2 Mbit/s (tc tbf);
5. scenario 1, then the public member's link is cut for 60 s and restored.

Root only (network namespaces). Run: ``sudo python -m bench.internet`` (about 15 minutes); writes
bench/results/internet.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.netbed import INTERNET, Netbed, check_available, remove_stale_beds  # noqa: E402

PUBLIC = [str(INTERNET)]
RESULTS = Path(__file__).parent / "results" / "internet.json"


def start(member, loopback: bool, **options) -> bool:
    try:
        member.start(host="127.0.0.1" if loopback else "0.0.0.0", reachable_networks=PUBLIC, call_timeout=6.0,
                     **options)
        return True
    except Exception as e:  # a failed join is a measurement, not a crash
        print(f"  {member.name}: join failed: {e}", flush=True)
        return False


def play_round(members, round_: int, gather_timeout: float) -> dict:
    """Everyone publishes, then gathers until it holds every other member's groups; per member: seconds, complete."""
    with ThreadPoolExecutor(len(members)) as pool:
        list(pool.map(lambda m: m.call("publish", round=round_), members))

        def gather(member):
            others = {o.peer_id for o in members if o is not member}
            got: set[str] = set()
            started = time.monotonic()
            while not others <= got and time.monotonic() - started < gather_timeout:
                got |= set(member.call("gather", round=round_, timeout=gather_timeout + 30)["peers"])
            return member.name, {"seconds": round(time.monotonic() - started, 3), "complete": others <= got,
                                 "peers": len(got & others), "others": len(others)}

        return dict(pool.map(gather, members))


def summarize(rounds: list[dict]) -> dict:
    times = sorted(r["seconds"] for one in rounds for r in one.values())
    complete = [all(r["complete"] for r in one.values()) for one in rounds]
    return {
        "rounds": len(rounds),
        "rounds_every_member_got_every_other": sum(complete),
        "gather_p50_s": round(statistics.median(times), 3) if times else None,
        "gather_p95_s": round(times[min(len(times) - 1, int(0.95 * len(times)))], 3) if times else None,
    }


def topology(bed: Netbed, scenario: int, loopback: bool):
    """(members, who joins through whom) of a scenario; on loopback all members share one host."""
    if loopback:
        host = bed.public("loop")
        count = {1: 3, 2: 3, 3: 3, 4: 8, 5: 3}[scenario]
        return [bed.member(host, f"m{i}") for i in range(count)]
    if scenario in (1, 5):
        return [bed.member(bed.public("pub"), "pub"), bed.member(bed.home("a"), "a"), bed.member(bed.home("b"), "b")]
    if scenario in (2, 3):
        return [bed.member(bed.public("pub"), "pub"), bed.member(bed.home("a", upnp=scenario == 3), "a"),
                bed.member(bed.home("b"), "b")]
    members = [bed.member(bed.public(f"pub{i}"), f"pub{i}") for i in range(2)]
    members += [bed.member(bed.home(f"h{i}", rate_mbit=2.0 if i == 0 else None), f"h{i}") for i in range(6)]
    return members


def run_scenario(scenario: int, loopback: bool, rounds: int, gather_timeout: float) -> dict:
    with Netbed() as bed:
        members = topology(bed, scenario, loopback)
        first, rest = members[0], members[1:]
        joins = [start(first, loopback)]
        for member in rest:
            if scenario in (2, 3) and member is members[2] and not loopback:
                # the friend joins with the home member's invite alone: its circuit (2) or mapped address (3)
                home = members[1]
                own = [a for a in home.invite if a.endswith(f"/p2p/{home.peer_id}") and "/198.51.100." not in a]
                joins.append(start(member, loopback, initial_peers=own))
            else:
                joins.append(start(member, loopback, initial_peers=first.invite))
        joined = [m for m, ok in zip(members, joins) if ok]
        verdicts = {m.name: (m.state()["events"] or [{}])[-1].get("status") for m in joined}
        played = [play_round(joined, r, gather_timeout) for r in range(1, rounds + 1)]
        result = {"members": len(members), "joins_succeeded": sum(joins), "reachability": verdicts,
                  **summarize(played)}
        if scenario == 5 and not loopback:
            result.update(partition(bed, joined, rounds, gather_timeout))
        result["per_round"] = played
        return result


def partition(bed: Netbed, members, played: int, gather_timeout: float) -> dict:
    """Cut the public member's link for 60 s (rounds go on), restore it; rounds until exchange is whole again."""
    public = members[0]
    bed.link(public.host, up=False)
    cut_at = time.monotonic()
    during = []
    round_ = played
    while time.monotonic() - cut_at < 60:
        round_ += 1
        during.append(play_round(members, round_, gather_timeout))
    bed.link(public.host, up=True)
    after = []
    resumed = None
    for i in range(6):
        round_ += 1
        after.append(play_round(members, round_, gather_timeout))
        if resumed is None and all(r["complete"] for r in after[-1].values()):
            resumed = i + 1
    return {"partition_rounds": len(during), "rounds_until_resumed_after_partition": resumed,
            "after_partition": summarize(after)}


def table(paths: list[Path]) -> str:
    """The markdown table of docs/internet.md: per scenario, the median and range over the runs in ``paths``."""
    runs = [json.loads(p.read_text()) for p in paths]

    def spread(values):
        values = sorted(v for v in values if v is not None)
        if not values:
            return "-"
        return f"{statistics.median(values):.3f} [{values[0]:.3f}-{values[-1]:.3f}]"

    lines = ["| scenario | joins | complete rounds | gather p50 (s) | gather p95 (s) | loopback p50 (s) | loopback p95 (s) "
             "| p95 ratio |", "|---|---|---|---|---|---|---|---|"]
    for key in sorted(runs[0]):
        entries = [run[key] for run in runs if key in run]
        net = [e["internet"] for e in entries]
        loop = [e["loopback"] for e in entries]
        lines.append(
            f"| {key.split('_')[1]} | {sum(n['joins_succeeded'] for n in net)}/{sum(n['members'] for n in net)} "
            f"| {sum(n['rounds_every_member_got_every_other'] for n in net)}/{sum(n['rounds'] for n in net)} "
            f"| {spread(n['gather_p50_s'] for n in net)} | {spread(n['gather_p95_s'] for n in net)} "
            f"| {spread(n['gather_p50_s'] for n in loop)} | {spread(n['gather_p95_s'] for n in loop)} "
            f"| {spread(e.get('gather_p95_ratio') for e in entries)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="1,2,3,4,5")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--gather-timeout", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--table", type=Path, nargs="+", help="print the table of these result files and exit")
    args = parser.parse_args()
    if args.table:
        print(table(args.table))
        return
    check_available()
    remove_stale_beds()
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    for scenario in map(int, args.scenarios.split(",")):
        entry = {}
        for loopback in (False, True):
            label = "loopback" if loopback else "internet"
            print(f"scenario {scenario} on {label}", flush=True)
            started = time.monotonic()
            entry[label] = run_scenario(scenario, loopback, args.rounds, args.gather_timeout)
            entry[label]["wall_s"] = round(time.monotonic() - started, 1)
            print({k: v for k, v in entry[label].items() if k != "per_round"}, flush=True)
        internet, loop = entry["internet"], entry["loopback"]
        if internet["gather_p95_s"] and loop["gather_p95_s"]:
            entry["gather_p95_ratio"] = round(internet["gather_p95_s"] / loop["gather_p95_s"], 2)
        entry["command"] = f"python -m bench.internet --scenarios {scenario} --rounds {args.rounds}"
        results[f"scenario_{scenario}"] = entry
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
