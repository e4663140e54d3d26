"""One SAPO round: GRPO with rollout sharing, top to bottom.

:mod:`node.sapo.round` plays a round (sample I local questions, generate G completions each, share them, take J peer
groups, score everything with our own verifier, one GRPO update); :mod:`node.sapo.scoring` holds its steps that need
neither a model nor a network; :mod:`node.sapo.peer_text` bounds what a peer's completion carries beyond its answer;
:mod:`node.sapo.peer_buffer` holds peers' verified groups for a round to take, :mod:`node.sapo.teaching` orders them
by what they can teach this node when the teaching-first choice is set.

May import: :mod:`node.swarm` (through its exchange interface), :mod:`node.learning` (the policy and learner),
:mod:`node.tasks` and the seam. Never the runner, the CLI, :mod:`node.hub` or :mod:`node.chain`: the runner calls the
round and owns events, persistence and the chain.
"""
