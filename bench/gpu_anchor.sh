#!/usr/bin/env bash
# Issue 29, point 1, on one NVIDIA GPU: the pull toward the starting weights (training.anchor_decay = 3000) against
# none (0), paired by seed. Every run at once on the one GPU: 5 seeds x 2 settings x 2 nodes = 20 node processes,
# each its own `bench/swarm_vs_solo.py` invocation (I=2,J=2, the demo's settings, 200 held-out questions greedy,
# evaluated every 5 rounds), all stopped by the same wall budget; then `bench/paired_codes.py` pairs them.
#
#   bash bench/gpu_anchor.sh                       # from the repository root, the node's environment active
#   MODEL=DIR BUDGET_MIN=7 bash bench/gpu_anchor.sh  # DIR: a model folder (the bundled GGUF converted, say)
#
# Env: MODEL (default: bundled), DEVICE (default: cuda; cpu with MODEL=tiny checks the plumbing), SEEDS, ROUNDS,
# BUDGET_MIN (each invocation's wall budget), RESULTS (where the per-seed learning.json files and paired.json go),
# WORK (node data), ARCHIVE (a .tgz of RESULTS and the run logs: archive_results). The settings every GPU sweep
# shares are in bench/gpu_runs.sh (start_run).
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1
PY=${PY:-python3}
MODEL=${MODEL:-bundled}; SEEDS=${SEEDS:-0 1 2 3 4}; ROUNDS=${ROUNDS:-30}; BUDGET_MIN=${BUDGET_MIN:-7}
RESULTS=${RESULTS:-bench/results/anchor_gpu}; WORK=${WORK:-/tmp/rl-swarm-anchor}
. "$(dirname "$0")/gpu_runs.sh"
gpu name,memory.total
mkdir -p "$WORK"; PIDS=""
step "seeds [$SEEDS], anchor_decay [0 3000], $ROUNDS rounds, $BUDGET_MIN min each"
for X in 0 3000; do
  for S in $SEEDS; do
    start_run "$X-s$S" --nodes 2 --configs I=2,J=2 --seeds "$S" --rounds "$ROUNDS" \
      --set training.anchor_decay="$X" --out "$RESULTS/$X/s$S" --work "$WORK/$X/s$S"
  done
done
wait_for_runs $PIDS
rm -f "$RESULTS"/*/s*/learning_*.png
$PY bench/paired_codes.py "$RESULTS/3000" "$RESULTS/0" --incomplete --labels "anchor_decay 3000" "anchor_decay 0" \
  --out "$RESULTS/paired.json"
archive_results
