"""A catalog model's shape twin: its exact architecture with random weights, for memory measurements offline.

A training step's memory depends on the architecture (parameter count, layers, hidden size, vocabulary), the round's
token counts and the optimizer, not on the weights' values. This machine cannot download the catalog's Hub models, so
the benches measure their twins: ``config.json`` of the Hub model written from the architecture below (parameter
counts equal the catalog's), weights drawn by transformers' own initialization and saved in bfloat16 as the Hub
checkpoints are, and the bundled model's tokenizer (its ids fit in every catalog vocabulary).

A random model never ends a completion by itself, so every completion runs to ``max_new_tokens``: the longest
rounds the settings allow, an upper bound on what the real model's rounds need.

    python bench/shape_twin.py Qwen/Qwen2.5-0.5B-Instruct    # prints the folder; bench/memory.py --models <folder>
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CACHE = Path.home() / ".cache" / "rl-swarm-bench"

QWEN_VOCAB, SMOLLM_VOCAB = 151936, 49152


def _shape(config_class: str, hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, vocab: int,
           **rest) -> tuple[str, dict]:
    return config_class, {"hidden_size": hidden, "intermediate_size": intermediate, "num_hidden_layers": layers,
                          "num_attention_heads": heads, "num_key_value_heads": kv_heads, "vocab_size": vocab,
                          "tie_word_embeddings": True, **rest}


# The Hub configs' architecture fields (the rest are transformers' defaults for the class).
ARCHITECTURES: dict[str, tuple[str, dict]] = {
    "Qwen/Qwen2.5-1.5B-Instruct": _shape("Qwen2Config", 1536, 8960, 28, 12, 2, QWEN_VOCAB,
                                         max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6),
    "Qwen/Qwen3-0.6B": _shape("Qwen3Config", 1024, 3072, 28, 16, 8, QWEN_VOCAB, head_dim=128,
                              max_position_embeddings=40960, rope_theta=1e6, rms_norm_eps=1e-6),
    "Qwen/Qwen2.5-0.5B-Instruct": _shape("Qwen2Config", 896, 4864, 24, 14, 2, QWEN_VOCAB,
                                         max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6),
    "HuggingFaceTB/SmolLM2-360M-Instruct": _shape("LlamaConfig", 960, 2560, 32, 15, 5, SMOLLM_VOCAB,
                                                  max_position_embeddings=8192, rope_theta=1e5, rms_norm_eps=1e-5),
}


def twin_folder(model_id: str, cache_dir: Path = CACHE) -> Path:
    return cache_dir / "shape-twins" / model_id.replace("/", "--")


def build(model_id: str, cache_dir: Path = CACHE) -> Path:
    """The twin's folder under ``cache_dir``, written once (a folder that exists is complete)."""
    import tempfile

    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    from node import models

    target = twin_folder(model_id, cache_dir)
    if target.is_dir():
        return target
    config_class, fields = ARCHITECTURES[model_id]
    config = getattr(transformers, config_class)(**fields)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    counted = sum(p.numel() for p in model.parameters())
    expected = models.CATALOG[model_id].params
    if counted != expected:
        raise SystemExit(f"{model_id}: the architecture has {counted} parameters, the catalog says {expected}")
    _, tokenizer = models.load(models.resolve("bundled"), cache_dir=cache_dir, dtype=torch.float32, device="cpu")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", choices=sorted(ARCHITECTURES))
    parser.add_argument("--cache-dir", type=Path, default=CACHE)
    args = parser.parse_args()
    for model_id in args.models:
        print(build(model_id, args.cache_dir))


if __name__ == "__main__":
    main()
