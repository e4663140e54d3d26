"""The multi-stage game: answer, critique peers' answers, revise (RL Swarm's original game, played beside SAPO).

Every node of a round works on the same questions (drawn from the swarm's game seed and the round number), so a
critic sees several peers' answers to the question it knows the ground truth of. Per round:

1. answer: G completions per question, scored by our own verifier; the best one per question is published;
2. critique: up to K peers' answers, anonymized and shuffled, judged in a fixed format; scored against our own
   regenerated ground truth; the best critique per question is published with the answers it judged;
3. revise: the peers' answers and critiques; the completion names the critics' majority and gives a final answer;
   scored for correctness, and for reading the critics right only where they were right.

Each stage is one GRPO update of the same model (:mod:`node.game.driver`). Modules: :mod:`node.game.prompts`
(prompts and parsers), :mod:`node.game.rewards`, :mod:`node.game.records` (the wire format),
:mod:`node.game.exchange` (publishing and gathering stage records: in memory and over the DHT).
"""

STAGES = ("answer", "critique", "revise")  # stage numbers are 1, 2, 3 (the chain's stages are 0, 1, 2)
# Families with short numeric answers a critic can compare at a glance, played when tasks.weights names none; the
# same for every member whatever its model, since the whole swarm answers the same questions. (gsm_symbolic, the
# original game's kind of task, cannot be regenerated from a seed and an index, so node.tasks.source refuses it.)
GAME_FAMILIES = ("basic_arithmetic", "chain_sum", "products", "gcd")

# Reward weights (why these: node.game.rewards); here, free of heavy imports, so the GUI can scale its charts.
CORRECTNESS_WEIGHT = 1.0
FORMAT_WEIGHT = 0.25
CONSENSUS_WEIGHT = 0.5
STAGE_MAX_REWARD = {
    "answer": CORRECTNESS_WEIGHT + FORMAT_WEIGHT,
    "critique": CORRECTNESS_WEIGHT + FORMAT_WEIGHT,
    "revise": CORRECTNESS_WEIGHT + CONSENSUS_WEIGHT + FORMAT_WEIGHT,
}
