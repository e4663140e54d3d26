"""A catalog model's shape twin: its exact architecture with random weights, for memory measurements offline.

A training step's memory depends on the architecture (parameter count, layers, hidden size, vocabulary), the round's
token counts and the optimizer, not on the weights' values. This machine cannot download the catalog's Hub models, so
the benches measure their twins: ``config.json`` of the Hub model written from the architecture below (parameter
counts equal the catalog's), weights drawn by transformers' own initialization and saved in bfloat16 as the Hub
checkpoints are, and the bundled model's tokenizer (its ids fit in every catalog vocabulary).

A random model never ends a completion by itself, so every completion runs to ``max_new_tokens``: the longest
rounds the settings allow, an upper bound on what the real model's rounds need.

    python bench/shape_twin.py Qwen/Qwen2.5-0.5B-Instruct    # writes the folder once and prints where it is

``bench/memory.py --twin`` measures rounds of a saved twin, ``bench/fit.py`` one step of a twin built in memory.
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

# Published architectures of the catalog's Hub models (the config.json of each repository).
ARCHITECTURES = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": {  # the bundled model's architecture
        "model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30, "intermediate_size": 1536,
        "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152, "tie_word_embeddings": True,
        "max_position_embeddings": 8192, "rope_theta": 1e5, "rms_norm_eps": 1e-5,
    },
    "HuggingFaceTB/SmolLM2-360M-Instruct": {
        "model_type": "llama", "hidden_size": 960, "num_hidden_layers": 32, "intermediate_size": 2560,
        "num_attention_heads": 15, "num_key_value_heads": 5, "vocab_size": 49152, "tie_word_embeddings": True,
        "max_position_embeddings": 8192, "rope_theta": 1e5, "rms_norm_eps": 1e-5,
    },
    "Qwen/Qwen2.5-0.5B-Instruct": {
        "model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24, "intermediate_size": 4864,
        "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
        "max_position_embeddings": 32768, "rope_theta": 1e6, "rms_norm_eps": 1e-6,
    },
    "Qwen/Qwen3-0.6B": {
        "model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 28, "intermediate_size": 3072,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
        "tie_word_embeddings": True, "max_position_embeddings": 40960, "rope_theta": 1e6, "rms_norm_eps": 1e-6,
    },
    "Qwen/Qwen2.5-1.5B-Instruct": {
        "model_type": "qwen2", "hidden_size": 1536, "num_hidden_layers": 28, "intermediate_size": 8960,
        "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
        "max_position_embeddings": 32768, "rope_theta": 1e6, "rms_norm_eps": 1e-6,
    },
}


def twin_model(model_id: str, tokenizer, dtype):
    """``model_id``'s architecture with transformers' random initialization (seeded), its special tokens the
    bundled tokenizer's."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from node.learning import models

    fields = dict(ARCHITECTURES[model_id])
    config = AutoConfig.for_model(fields.pop("model_type"), **fields, bos_token_id=tokenizer.bos_token_id,
                                  eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    counted = sum(p.numel() for p in model.parameters())
    if counted != models.CATALOG[model_id].params:
        raise SystemExit(f"{model_id}: the architecture has {counted} parameters, the catalog says "
                         f"{models.CATALOG[model_id].params}")
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def twin_folder(model_id: str, cache_dir: Path = CACHE) -> Path:
    return cache_dir / "shape-twins" / model_id.replace("/", "--")


def build(model_id: str, cache_dir: Path = CACHE, tokenizer=None) -> Path:
    """The twin's folder under ``cache_dir``, written once (a folder that exists is complete), with ``tokenizer``
    (by default the bundled model's)."""
    import tempfile

    import torch

    from node.learning import models

    target = twin_folder(model_id, cache_dir)
    if target.is_dir():
        return target
    if tokenizer is None:
        _, tokenizer = models.load(models.resolve("bundled"), cache_dir=cache_dir, dtype=torch.float32, device="cpu")
    model = twin_model(model_id, tokenizer, torch.bfloat16)
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
