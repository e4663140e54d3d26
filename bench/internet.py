"""Swarm members behind home routers on a simulated internet (tests/netbed.py), against the same members on loopback.

Each member is a real DhtExchange (tests/netbed_peer.py) in its own network namespace, playing rounds the way the
node does since rounds stopped gathering: the exchange's background feed fills a real PeerGroupBuffer; at the start
of every swarm round (``--round-seconds``) each member takes J groups from its buffer at once and publishes its own
groups without waiting. Measured per scenario: joins, delivery latency (a member's publish call -> the first group
of that round reaching another member's buffer; one machine, one clock), rounds in which every member received
every other member's groups, the share of wall time a round spent in ``take`` and ``publish`` (what it would wait),
and for scenario 5 the rounds published during the cut, those lost, and how soon after the link is back each
member's rounds arrive again. Scenarios (issue 27):

1. a public member starts the swarm, two home members (NAT, no UPnP) join with its invite;
2. a home member joins a public one and is reached through its relay; a friend at another home joins with the
   home member's invite (its relay circuit) alone;
3. the same with UPnP on the first home's router: the friend joins through the mapped port;
4. eight members, six of them at home, one home link capped at 2 Mbit/s (tc tbf);
5. scenario 1, then the public member's link is cut for 60 s and restored.

Root only (network namespaces). Run: ``sudo python -m bench.internet --out <file>`` (about 15 minutes); the table
of several runs: ``python -m bench.internet --table <files>``.
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
DRAIN_S = 12.0  # after the last round: time for its groups to arrive
CUT_S = 60.0


def start(member, loopback: bool, **options) -> bool:
    try:
        member.start(host="127.0.0.1" if loopback else "0.0.0.0", reachable_networks=PUBLIC, call_timeout=6.0,
                     **options)
        return True
    except Exception as e:  # a failed join is a measurement, not a crash
        print(f"  {member.name}: join failed: {e}", flush=True)
        return False


def percentile(values: list[float], q: float) -> float | None:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 3) if values else None


def deliveries(reports: dict[str, dict], ids: dict[str, str]) -> dict[tuple[str, int, str], float | None]:
    """(publisher, swarm round, receiver) -> seconds from the publish call to the first group of that round in the
    receiver's buffer (None: never arrived)."""
    first: dict[tuple[str, int, str], float] = {}
    for receiver, report in reports.items():
        for peer, round_, _, at in report["arrivals"]:
            key = (peer, round_, ids[receiver])
            first[key] = min(first.get(key, at), at)
    out = {}
    for publisher, report in reports.items():
        for round_, at in report["published"].items():
            for receiver in reports:
                if receiver != publisher:
                    key = (ids[publisher], int(round_), ids[receiver])
                    out[key] = round(first[key] - at, 3) if key in first else None
    return out


def summarize(reports: dict[str, dict], ids: dict[str, str], rounds: set[int], round_seconds: float) -> dict:
    """Over the swarm rounds ``rounds`` (every member published in each): latency, complete rounds, waiting."""
    got = {k: v for k, v in deliveries(reports, ids).items() if k[1] in rounds}
    latencies = [v for v in got.values() if v is not None]
    complete = [r for r in rounds if all(v is not None for k, v in got.items() if k[1] == r)]
    waiting, publishing, filled = {}, {}, {}
    for name, report in reports.items():
        played = [r for r in report["rounds"] if r["round"] in rounds]
        wall = len(played) * round_seconds
        waiting[name] = round(sum(r["take_s"] for r in played) / wall, 6) if wall else None
        publishing[name] = round(sum(r["publish_s"] for r in played) / wall, 6) if wall else None
        filled[name] = round(sum(r["taken"] >= 2 for r in played) / len(played), 3) if played else None
    return {
        "rounds": len(rounds), "rounds_every_member_got_every_other": len(complete),
        "deliveries": len(got), "delivered": len(latencies),
        "latency_p50_s": percentile(latencies, 0.5), "latency_p95_s": percentile(latencies, 0.95),
        "take_share": waiting, "publish_share": publishing, "j_filled_share": filled,
    }


def play(members, seconds: float, round_seconds: float, epoch: float) -> None:
    for m in members:
        m.call("feed", epoch=epoch, round_seconds=round_seconds)
    time.sleep(seconds)


def collect(members) -> tuple[dict[str, dict], dict[str, str]]:
    """Stop every member's rounds, let the last ones' groups arrive, read what each recorded."""
    with ThreadPoolExecutor(len(members)) as pool:
        list(pool.map(lambda m: m.call("stop_rounds"), members))
    time.sleep(DRAIN_S)
    with ThreadPoolExecutor(len(members)) as pool:
        reports = dict(zip((m.name for m in members), pool.map(lambda m: m.call("report"), members)))
    return reports, {m.name: m.peer_id for m in members}


def common_rounds(reports: dict[str, dict]) -> set[int]:
    """The swarm rounds every member published (the first and last are partial for some)."""
    sets = [set(map(int, r["published"])) for r in reports.values()]
    return set.intersection(*sets) if sets else set()


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


def run_scenario(scenario: int, loopback: bool, rounds: int, round_seconds: float) -> dict:
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
        epoch = float(int(time.time()))
        result = {"members": len(members), "joins_succeeded": sum(joins), "reachability": verdicts,
                  "round_seconds": round_seconds}
        if scenario == 5 and not loopback:
            reports, ids, cut = partition(bed, joined, rounds, round_seconds, epoch)
            result.update(cut_summary(reports, ids, cut, round_seconds))
        else:
            play(joined, rounds * round_seconds, round_seconds, epoch)
            reports, ids = collect(joined)
            played = common_rounds(reports)
            played -= {min(played, default=0), max(played, default=0)}  # rounds some joined mid-way
            result.update(summarize(reports, ids, played, round_seconds))
        result["unconfirmed_at_end"] = {name: r["unconfirmed"] for name, r in reports.items()}
        result["reports"] = reports
        result["peer_ids"] = ids
        return result


def partition(bed: Netbed, members, rounds: int, round_seconds: float, epoch: float):
    """Rounds go on while the public member's link is cut for 60 s, then restored, then ``rounds`` more rounds."""
    play(members, rounds / 2 * round_seconds, round_seconds, epoch)
    bed.link(members[0].host, up=False)
    cut_at = time.time()
    time.sleep(CUT_S)
    bed.link(members[0].host, up=True)
    restored_at = time.time()
    time.sleep(rounds * round_seconds)
    reports, ids = collect(members)
    return reports, ids, (cut_at, restored_at)


def cut_summary(reports: dict[str, dict], ids: dict[str, str], cut: tuple[float, float], round_seconds: float) -> dict:
    """Before / during / after the cut: the usual summary of each; rounds of the cut never delivered; seconds from
    the restore until each cut round's groups had all arrived; the first round after the restore that was whole."""
    cut_at, restored_at = cut
    played = common_rounds(reports)
    played -= {min(played, default=0), max(played, default=0)}
    published = {r: min(float(rep["published"][str(r)]) for rep in reports.values()) for r in played}
    before = {r for r in played if published[r] < cut_at - 1}
    during = {r for r in played if cut_at - 1 <= published[r] <= restored_at}
    after = {r for r in played if published[r] > restored_at}
    got = deliveries(reports, ids)
    lost = sorted({r for (_, r, _), v in got.items() if r in during and v is None})
    arrived = [published[r] + v - restored_at for (_, r, _), v in got.items() if r in during and v is not None]
    whole = sorted(r for r in after if all(v is not None for k, v in got.items() if k[1] == r))
    first_after = min(after, default=None)
    return {
        **summarize(reports, ids, before | after, round_seconds),
        "before_cut": summarize(reports, ids, before, round_seconds),
        "during_cut": summarize(reports, ids, during, round_seconds),
        "after_cut": summarize(reports, ids, after, round_seconds),
        "cut_s": CUT_S, "partition_rounds": len(during), "rounds_lost_to_partition": len(lost), "lost_rounds": lost,
        "cut_rounds_all_arrived_s_after_restore": round(max(arrived), 1) if arrived and not lost else None,
        # 1: the first round published after the restore reached every member
        "rounds_until_whole_after_restore": (whole[0] - first_after + 1) if whole and first_after is not None
        else None,
    }


def table(paths: list[Path]) -> str:
    """The markdown tables of docs/internet.md: per scenario, the median [min-max] over the runs in ``paths``."""
    runs = [json.loads(p.read_text()) for p in paths]

    def spread(values, digits=3):
        values = sorted(v for v in values if v is not None)
        if not values:
            return "-"
        return f"{statistics.median(values):.{digits}f} [{values[0]:.{digits}f}-{values[-1]:.{digits}f}]"

    def worst(shares):  # the member that spent the largest share of its rounds in take
        return max((v for v in shares.values() if v is not None), default=None)

    lines = ["| scenario | joins | complete rounds | latency p50 (s) | latency p95 (s) | loopback p50 (s) "
             "| loopback p95 (s) | p95 ratio | waiting share (take, max member) | J filled (min member) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    cut = ["| run | rounds during the cut | rounds lost | cut rounds all delivered (s after restore) "
           "| rounds until whole after restore | latency p95 during / after (s) |", "|---|---|---|---|---|---|"]
    for key in sorted(runs[0]):
        entries = [run[key] for run in runs if key in run]
        net = [e["internet"] for e in entries]
        loop = [e["loopback"] for e in entries]
        lines.append(
            f"| {key.split('_')[1]} | {sum(n['joins_succeeded'] for n in net)}/{sum(n['members'] for n in net)} "
            f"| {sum(n['rounds_every_member_got_every_other'] for n in net)}/{sum(n['rounds'] for n in net)} "
            f"| {spread(n['latency_p50_s'] for n in net)} | {spread(n['latency_p95_s'] for n in net)} "
            f"| {spread(n['latency_p50_s'] for n in loop)} | {spread(n['latency_p95_s'] for n in loop)} "
            f"| {spread((e.get('latency_p95_ratio') for e in entries), 2)} "
            f"| {spread((worst(n['take_share']) for n in net + loop), 6)} "
            f"| {spread((min(n['j_filled_share'].values()) for n in net), 2)} |")
        for i, n in enumerate(net, 1):
            if "partition_rounds" in n:
                cut.append(f"| {i} | {n['partition_rounds']} | {n['rounds_lost_to_partition']} "
                           f"| {n['cut_rounds_all_arrived_s_after_restore']} | {n['rounds_until_whole_after_restore']} "
                           f"| {n['during_cut']['latency_p95_s']} / {n['after_cut']['latency_p95_s']} |")
    return "\n".join(lines + [""] + cut)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="1,2,3,4,5")
    parser.add_argument("--rounds", type=int, default=20, help="swarm rounds each scenario plays (5: before + after)")
    parser.add_argument("--round-seconds", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--table", type=Path, nargs="+", help="print the tables of these result files and exit")
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
            entry[label] = run_scenario(scenario, loopback, args.rounds, args.round_seconds)
            entry[label]["wall_s"] = round(time.monotonic() - started, 1)
            print({k: v for k, v in entry[label].items() if k not in ("reports", "peer_ids")}, flush=True)
        internet, loop = entry["internet"], entry["loopback"]
        if internet["latency_p95_s"] and loop["latency_p95_s"]:
            entry["latency_p95_ratio"] = round(internet["latency_p95_s"] / loop["latency_p95_s"], 2)
        entry["command"] = (f"python -m bench.internet --scenarios {scenario} --rounds {args.rounds} "
                            f"--round-seconds {args.round_seconds}")
        results[f"scenario_{scenario}"] = entry
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
