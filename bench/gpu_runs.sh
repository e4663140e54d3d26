# Sourced by the bench/gpu_*.sh sweeps, which start their runs in the background on one GPU: a timestamped log line
# (step), a GPU reading (gpu), one run started the way every sweep starts it (start_run), waiting for the runs
# while logging the GPU's load (wait_for_runs), and packing what a sweep wrote into one file (archive_results).
T0=$(date +%s)
step() { echo "=== +$(( $(date +%s) - T0 ))s $*"; }
gpu() { nvidia-smi --query-gpu="$1" --format=csv,noheader 2>/dev/null || echo "no NVIDIA GPU"; }

# wait_for_runs PID...: every 20 s how many are still going and the GPU's load, until none is.
wait_for_runs() {
  local n pid
  while :; do
    n=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && n=$((n + 1)); done
    [ "$n" -gt 0 ] || break
    sleep 20
    step "$n runs going; GPU $(gpu utilization.gpu,memory.used)"
  done
  # `wait` alone would also wait for the shell's other children; only the runs are waited for.
  wait "$@"
}

# start_run NAME ARGS...: one `bench/swarm_vs_solo.py` invocation in the background, its log $WORK/log-NAME.txt, its
# pid added to PIDS. Every GPU sweep shares these settings: the demo's node settings, 200 held-out questions greedy
# every EVAL_EVERY rounds (default 5; an evaluation costs about as much as a few rounds, so longer runs take fewer),
# float32 AdamW moments (as on the CPU; 8-bit ones are CUDA's default where bitsandbytes is installed), the sweep's
# wall budget, and the memory bounds of many nodes on one GPU. ARGS add the run's own (--nodes, --configs, --seeds,
# --rounds, --out, --work, --set ...). Reads PY, MODEL, DEVICE, EVAL_EVERY and BUDGET_MIN.
start_run() {
  local name=$1
  shift
  $PY bench/swarm_vs_solo.py --eval-every "${EVAL_EVERY:-5}" --eval-questions 200 --eval-samples 0 --model "$MODEL" \
    --set training.device="${DEVICE:-cuda}" --set training.optimizer_states=float32 --budget-min "$BUDGET_MIN" \
    --node-gb 1 --memory-reserve-gb 4 "$@" > "$WORK/log-$name.txt" 2>&1 &
  PIDS="$PIDS $!"
}

# archive_results: with ARCHIVE set, RESULTS and the runs' logs also go into that .tgz. The device tool brings back only
# a few files from $OUT and no folder nested as deep as RESULTS, so on a lease: ARCHIVE=$OUT/sweep.tgz.
archive_results() {
  [ -n "${ARCHIVE:-}" ] || return 0
  tar -czf "$ARCHIVE" "$RESULTS" "$WORK"/log-*.txt && step "results and run logs in $ARCHIVE"
}
