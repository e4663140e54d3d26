# Sourced by the bench/gpu_*.sh sweeps, which start their runs in the background on one GPU: a timestamped log line
# (step), a GPU reading (gpu), and waiting for the runs while logging the GPU's load (wait_for_runs).
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
