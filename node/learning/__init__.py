"""The learner: the policy, its GRPO update, the models it can load and what this machine can train.

:mod:`node.learning.grpo` (policy sampling and one long-lived TRL ``GRPOTrainer``), :mod:`node.learning.models` (the
model catalog and loading), :mod:`node.learning.checkpoint` (atomic checkpoints), :mod:`node.learning.evaluation`
(held-out evaluation), :mod:`node.learning.hardware` (recommended settings per machine) and
:mod:`node.learning.limits` (CPU thread and GPU memory caps).

May import: the seam at the top of ``node`` (api, config, errors, events) and :mod:`node.tasks`. Never
:mod:`node.swarm`, :mod:`node.sapo`, :mod:`node.game`, :mod:`node.hub`, :mod:`node.chain` or the runner: the learner
knows nothing of peers; a round hands it groups (an import-linter contract in pyproject.toml holds this).
"""
