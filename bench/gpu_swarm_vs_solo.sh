#!/usr/bin/env bash
# Issue 29, point 2, on one NVIDIA GPU: 4 nodes sharing (I=2,J=2) against solo nodes (I=4,J=0), paired by seed, every
# run at once on the one GPU, all stopped by the same wall budget; then `bench/paired_codes.py` pairs them at the last
# evaluation both reached and at equal training seconds.
#
#   bash bench/gpu_swarm_vs_solo.sh                          # from the repository root, the node's environment active
#   MODEL=DIR BUDGET_MIN=7 bash bench/gpu_swarm_vs_solo.sh   # DIR: a model folder (the bundled GGUF converted, say)
#
# Solo nodes take nothing from peers, so each one is an independent draw of the same experiment: SOLO_NODES of them
# (default 2) estimate a seed's solo accuracy without bias, at half the GPU memory of 4. With the defaults that is
# 5 seeds x (4 + 2) = 30 node processes of the bundled model, ~3.3 GB of GPU memory each (float32 AdamW moments, as
# on the CPU): an H200 holds them, an H100 does not.
#
# Env: MODEL (default: bundled), DEVICE (default: cuda; cpu with MODEL=tiny checks the plumbing), SEEDS, ROUNDS (a
# multiple of EVAL_EVERY, default 5), BUDGET_MIN (each invocation's wall budget), SOLO_NODES, RESULTS (where the
# per-seed learning.json files and paired.json go), WORK (node data), ARCHIVE (a .tgz of RESULTS and the run logs:
# bench/gpu_runs.sh, archive_results), SPECIALIZE (W: a heterogeneous swarm, node k mostly on family k mod 3;
# `bench/swarm_vs_solo.py --specialize`; with SOLO_NODES=4, so that solo nodes sample the families the shared ones do).
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1
# Thirty processes share the GPU: the caching allocator hands back what it does not use instead of keeping blocks.
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
PY=${PY:-python3}
MODEL=${MODEL:-bundled}; SEEDS=${SEEDS:-0 1 2 3 4}; ROUNDS=${ROUNDS:-60}; BUDGET_MIN=${BUDGET_MIN:-7}
SOLO_NODES=${SOLO_NODES:-2}; RESULTS=${RESULTS:-bench/results/swarm_gpu}; WORK=${WORK:-/tmp/rl-swarm-swarm-gpu}
. "$(dirname "$0")/gpu_runs.sh"
gpu name,memory.total
mkdir -p "$WORK"; PIDS=""
step "seeds [$SEEDS]: 4 nodes I=2,J=2 and $SOLO_NODES solo nodes I=4,J=0 each, up to $ROUNDS rounds, $BUDGET_MIN min"
for S in $SEEDS; do
  for ARM in "shared 4 I=2,J=2" "solo $SOLO_NODES I=4,J=0"; do
    read -r NAME NODES CONFIG <<<"$ARM"
    start_run "$NAME-s$S" --nodes "$NODES" --configs "$CONFIG" --seeds "$S" --rounds "$ROUNDS" \
      --out "$RESULTS/$NAME/s$S" --work "$WORK/$NAME/s$S" ${SPECIALIZE:+--specialize "$SPECIALIZE"}
  done
done
wait_for_runs $PIDS
rm -f "$RESULTS"/*/s*/learning_*.png
$PY bench/paired_codes.py "$RESULTS/shared" "$RESULTS/solo" --config I=2,J=2 I=4,J=0 --incomplete \
  --labels "4 nodes I=2,J=2" "solo I=4,J=0" --out "$RESULTS/paired.json"
archive_results
