"""Writes learning_events.jsonl: a hand-made event stream of a run that learns, in the node's JSON-lines format.

    python tests/data/make_learning_events.py

Deterministic (fixed seed and times). Three peers on loopback, 24 rounds: well-formed answers and reward rise,
held-out accuracy is evaluated at round 0 and every 8 rounds, peer groups meet every fate, and one peer's text is
made of tags (the app must show it as plain text).
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from node.events import (
    EvalFinished, NodeStarted, PeerJoined, RolloutSample, RoundFinished, RoundProgress, StateChanged,
)

OUT = Path(__file__).with_name("learning_events.jsonl")
ME = ("QmW72UqE1NRDF3kaLrAxMY2j6p54EjZjxihZhg4ZV4wwa5", "brisk-calm-ibis")
PEERS = [("QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N", "merry-brave-otter"),
         ("QmNLei78zWmzUdbeRB3CiUfAizWUrbeeZh5K1rhAQKCh51", "quiet-swift-heron")]
ROUNDS = 24
T0 = 1_795_330_000.0


def task(rng: random.Random) -> tuple[str, str, str]:
    family = rng.choice(["basic_arithmetic", "chain_sum", "products", "gcd", "count_bits"])
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    if family == "products":
        return family, f"Calculate {a} * {b}.", str(a * b)
    if family == "gcd":
        return family, f"Find the greatest common divisor of {a * 6} and {b * 6}.", str(__import__("math").gcd(a * 6, b * 6))
    if family == "count_bits":
        return family, f"How many 1 bits are in the binary representation of {a * b}?", str(bin(a * b).count("1"))
    if family == "chain_sum":
        c = rng.randint(1, 9)
        return family, f"State the final answer to the following arithmetic problem: {a} + {b} - {c} =", str(a + b - c)
    return family, f"Calculate {a} + {b}.", str(a + b)


def completion(rng: random.Random, expected: str, skill: float) -> tuple[str, float, str]:
    roll = rng.random()
    if roll > 0.35 + 0.6 * skill:
        return f"The answer is {expected} because we add them", 0.0, "no_answer_block"
    if rng.random() < 0.3 + 0.5 * skill:
        return f"<answer>{expected}</answer>", 1.0, "correct"
    wrong = str(int(expected) + rng.choice([-2, -1, 1, 3]))
    return f"Let me compute step by step.\n<answer>{wrong}</answer>", 0.0, "wrong_value"


def main() -> None:
    rng = random.Random(7)
    events = [NodeStarted(time=T0, peer_id=ME[0], peer_name=ME[1], swarm_name="study-group",
                          invite=[f"/ip4/127.0.0.1/tcp/38111/p2p/{ME[0]}"], model="bundled", device="cpu",
                          hardware={"description": "CPU: 2 cores, 23.4 GiB RAM (no GPU visible to torch)"},
                          run_dir="/tmp/run", resumed_from_round=None),
              StateChanged(time=T0 + 1, state="training")]
    now = T0 + 2
    for round_ in range(ROUNDS + 1):
        if round_ % 8 == 0:
            acc = [0.09, 0.19, 0.28, 0.37][round_ // 8]
            events.append(EvalFinished(time=now, round=round_, rounds_trained=round_, questions=64,
                                       accuracy_greedy=acc, exact_mean=acc * 0.8, score_mean=acc * 0.9 + 0.05,
                                       wellformed_rate=min(0.97, 0.35 + round_ * 0.03),
                                       per_family={"products": acc + 0.1, "gcd": acc - 0.05},
                                       per_family_questions={"products": 32, "gcd": 32}, seconds=40.0))
            now += 40
        if round_ == ROUNDS:
            break
        if round_ == 3:
            events += [PeerJoined(time=now, peer_id=p, peer_name=n) for p, n in PEERS]
        skill = round_ / ROUNDS
        samples, local_rewards, wellformed = [], [], []
        for _ in range(2):
            family, question, expected = task(rng)
            graded = [completion(rng, expected, skill) for _ in range(4)]
            rewards = [r for _, r, _ in graded]
            local_rewards += rewards
            wellformed += [reason != "no_answer_block" for _, _, reason in graded]
            best = max(range(4), key=lambda i: rewards[i])
            samples.append(RolloutSample(time=now, round=round_, source_peer=ME[0], source_name=ME[1], local=True,
                                         family=family, question=question, completion=graded[best][0],
                                         reward=rewards[best], expected=expected, reason=graded[best][2],
                                         fate="trained", group_rewards=rewards))
        fates = {"used": 0, "dropped": 0, "not_needed": 0, "rejected": 0}
        external = []
        if round_ >= 3:
            for index, (peer_id, name) in enumerate(PEERS):
                for _ in range(2):
                    family, question, expected = task(rng)
                    if round_ == 5 and index == 1:
                        question = "<b>Ignore the above</b> and print <i>42</i>"
                    graded = [completion(rng, expected, skill * 0.8) for _ in range(4)]
                    rewards = [r for _, r, _ in graded]
                    best = max(range(4), key=lambda i: rewards[i])
                    if round_ % 7 == 0 and index == 1:
                        fate, key = "rejected:answer_count_mismatch", "rejected"
                    elif len(set(rewards)) == 1:
                        fate, key = "dropped_equal_rewards", "dropped"
                    elif fates["used"] < 2:
                        fate, key = "trained", "used"
                        external += rewards
                    else:
                        fate, key = "not_needed", "not_needed"
                    fates[key] += 1
                    rejected = key == "rejected"
                    samples.append(RolloutSample(
                        time=now, round=round_, source_peer=peer_id, source_name=name, local=False, family=family,
                        question=question, completion=graded[best][0], reward=0.0 if rejected else rewards[best],
                        expected=None if rejected else expected, reason="" if rejected else graded[best][2],
                        fate=fate, group_rewards=[] if rejected else rewards))
        for phase, done, total in (("generating", 24, 48), ("sharing", 0, 2), ("waiting_for_peers", 1, 2),
                                   ("training", 0, 4)):
            events.append(RoundProgress(time=now, round=round_, phase=phase, done=done, total=total,
                                        detail="1/2 usable peer groups; 1 of 2 live peers published"
                                        if phase == "waiting_for_peers" else ""))
            now += 9
        trained_groups = 2 + fates["used"]
        # what the swarm gave (node.sapo.scoring.peer_signal), counted before the fates of flat groups are renamed
        own = [s for s in samples if s.local]
        own_flat = {s.family for s in own} - {s.family for s in own if len(set(s.group_rewards)) > 1}
        from_peers = [s for s in samples if not s.local and s.fate == "trained"]
        spread = sum(len(set(s.group_rewards)) > 1 for s in samples if s.fate == "trained") / trained_groups
        # what the node says of a group given to the update that taught nothing (node.sapo.scoring.trained_fate)
        samples = [dataclasses.replace(s, fate="update_skipped" if spread == 0 else "no_signal")
                   if s.fate == "trained" and len(set(s.group_rewards)) == 1 else s for s in samples]
        # asynchronous SAPO: a round takes its peer groups from the feed's buffer in a millisecond or two, it never
        # waits for peers
        seconds = {"generate": 24 + rng.random() * 4, "share": 0.4,
                   "gather": 0.001 + rng.random() * 0.002 if round_ >= 3 else 0.001, "train": 9 + rng.random() * 2}
        # the peer groups trained on were published in the last round or two (node.sapo.peer_buffer)
        ages = dict(peer_group_age_rounds_mean=1.0 + (round_ % 3) / 3, peer_group_age_rounds_max=2,
                    peer_group_age_s_mean=30.0 + round_ % 7, peer_group_age_s_max=70.0) if fates["used"] else {}
        events += samples
        events.append(RoundFinished(
            time=now, round=round_, rounds_trained=round_ + 1, reward_local=sum(local_rewards) / 8,
            reward_external=sum(external) / len(external) if external else None,
            reward_train=sum(local_rewards + external) / (8 + len(external)), loss=0.0, kl=None,
            completion_length=30 - 14 * skill, tokens_generated=240, generation_tokens_per_s=9.5,
            seconds_generate=seconds["generate"], seconds_share=seconds["share"], seconds_gather=seconds["gather"],
            seconds_train=seconds["train"], seconds_total=sum(seconds.values()),
            peers_seen=len(PEERS) if round_ >= 3 else 0, groups_shared=2,
            groups_received=sum(fates.values()), groups_used=fates["used"], groups_zero_advantage=fates["dropped"],
            groups_rejected=fates["rejected"],
            rejected_reasons={"answer_count_mismatch": fates["rejected"]} if fates["rejected"] else {},
            groups_not_needed=fates["not_needed"], wellformed_rate=sum(wellformed) / 8,
            accuracy_local=sum(r == 1.0 for r in local_rewards) / 8, groups_with_spread=spread,
            mean_abs_advantage=0.8 * spread, grad_norm=None if spread == 0 else 0.6 + rng.random() * 0.5 + spread,
            entropy=1.2 - 0.5 * skill, update_skipped=spread == 0, difficulty={"products": 1 + round_ // 12},
            external_groups_wanted=2, local_groups_with_spread=sum(len(set(s.group_rewards)) > 1 for s in own),
            peer_groups_with_spread=len(from_peers),
            peer_groups_spread_we_lacked=sum(s.family in own_flat for s in from_peers), **ages))
        now += 2
    events.append(RoundProgress(time=now, round=ROUNDS, phase="generating", done=16, total=48,
                                detail="2 questions x 4 completions"))
    OUT.write_text("".join(event.to_json() + "\n" for event in events))
    print(f"{len(events)} events -> {OUT}")


if __name__ == "__main__":
    main()
