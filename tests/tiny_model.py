"""A tiny random model for tests (a fixture, not production code): the bundled model's real tokenizer on a 2-layer
random Llama, so prompts, chat template and special tokens behave as with the real model."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from node.learning.models import LOADING, ResolvedModel, _prepare_for_generation


def tiny_random(
    tokenizer_source: ResolvedModel, out_dir: Path, *, hidden: int = 64, layers: int = 2, heads: int = 4
) -> Path:
    """Save a tiny, seeded, random Llama with ``tokenizer_source``'s tokenizer as a model folder; return it.

    Tests train and generate with it in seconds; it shares the real tokenizer, so prompts, chat template and
    special tokens behave as with the real model.
    """
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source.path_or_id, gguf_file=tokenizer_source.gguf_file)
    _prepare_for_generation(tokenizer)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with LOADING, torch.random.fork_rng(devices=[]):  # not while a load in another thread has tying switched off
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
