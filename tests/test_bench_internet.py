"""bench/internet.py's own arithmetic on made-up reports: deliveries, complete rounds, the partition's figures."""

from bench.internet import cut_summary, summarize

IDS = {"x": "PX", "y": "PY"}


def report(published: dict[int, float], arrivals: list[list], rounds_played=()) -> dict:
    return {"published": {str(r): t for r, t in published.items()}, "arrivals": arrivals,
            "rounds": [{"round": r, "take_s": 0.001, "publish_s": 0.002, "taken": 2, "at": 0.0} for r in rounds_played],
            "unconfirmed": 0}


def test_latency_is_from_the_publish_to_the_first_group_of_the_round_and_a_missing_one_breaks_the_round():
    reports = {
        "x": report({1: 10.0, 2: 12.0}, [["PY", 1, 0, 10.9], ["PY", 1, 1, 10.5], ["PY", 2, 0, 12.4]], [1, 2]),
        "y": report({1: 10.2, 2: 12.2}, [["PX", 1, 1, 10.6]], [1, 2]),  # x's round 2 never reached y
    }
    got = summarize(reports, IDS, {1, 2}, round_seconds=2.0)
    assert got["deliveries"] == 4 and got["delivered"] == 3
    assert got["rounds_every_member_got_every_other"] == 1
    assert got["latency_p50_s"] == 0.3  # 0.4 (x's round 1 at y), 0.3 (y's 1 at x: its first group), 0.2
    assert got["take_share"] == {"x": 0.0005, "y": 0.0005} and got["j_filled_share"] == {"x": 1.0, "y": 1.0}


def test_the_partition_counts_rounds_lost_and_how_soon_the_cut_rounds_arrived():
    # rounds 1-6 every 2 s from t=0; the cut from t=3 to t=7 (rounds 2-4 published during it or just before, their
    # stores still on the way); rounds 1 and 6 trimmed (some member joined or stopped during them)
    published = {r: 2.0 * (r - 1) for r in range(1, 7)}
    arrivals_x = [["PY", r, 0, published[r] + 0.5] for r in (1, 2, 5, 6)] + [["PY", 3, 0, 9.0], ["PY", 4, 0, 9.5]]
    arrivals_y = [["PX", r, 0, published[r] + 0.5] for r in (1, 2, 3, 5, 6)]  # x's round 4 never arrived at y
    reports = {"x": report(published, arrivals_x, range(1, 7)), "y": report(published, arrivals_y, range(1, 7))}
    got = cut_summary(reports, IDS, (3.0, 7.0), round_seconds=2.0)
    assert got["partition_rounds"] == 3 and got["lost_rounds"] == [4] and got["rounds_lost_to_partition"] == 1
    assert got["cut_rounds_all_arrived_s_after_restore"] is None  # one was lost
    assert got["rounds_until_whole_after_restore"] == 1  # round 5 was whole
    assert got["during_cut"]["delivered"] == 5 and got["after_cut"]["rounds"] == 1
