"""bench/llamacpp.py, issue 35's llama.cpp anchor: its samplers are skipped, saying why, where llama_cpp does not
import (CI); the GGUF it writes holds the policy's own weights in llama.cpp's layout, with the source file's
metadata."""

from __future__ import annotations

import sys
from unittest import mock

import gguf
import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

from bench import llamacpp
from bench.generation import available_samplers


def test_llamacpp_samplers_are_skipped_where_llama_cpp_does_not_import(capsys):
    with mock.patch.dict(sys.modules, {"llama_cpp": None}):  # None: importing it raises ImportError
        kept = available_samplers(["preallocated/float32", "llamacpp/bf16", "onnxruntime/float32", "llamacpp/f32"])
    assert kept == ["preallocated/float32", "onnxruntime/float32"]
    said = capsys.readouterr().err
    assert "skipping llamacpp/bf16, llamacpp/f32" in said and "llama_cpp does not import" in said
    assert available_samplers(["preallocated/float32"]) == ["preallocated/float32"]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (6, 2)])
def test_query_and_key_rows_are_what_transformers_gguf_loader_undoes(heads, kv_heads):
    rng = np.random.default_rng(0)
    undo = LlamaTensorProcessor()._reverse_permute_weights
    query, key = rng.standard_normal((heads * 8, 5)), rng.standard_normal((kv_heads * 8, 5))
    assert not np.array_equal(llamacpp.to_gguf_rows(query, heads), query)
    assert np.array_equal(undo(llamacpp.to_gguf_rows(query, heads), heads, heads), query)
    assert np.array_equal(undo(llamacpp.to_gguf_rows(key, kv_heads), heads, kv_heads), key)


def _tiny_llama() -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def _source_gguf(path, model) -> None:
    """A GGUF with ``model``'s tensor names (placeholder values) and some metadata, as the bundled file has."""
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("tiny")
    writer.add_block_count(model.config.num_hidden_layers)
    writer.add_token_list([f"t{i}" for i in range(model.config.vocab_size)])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, model.config.num_hidden_layers)
    for name in model.state_dict():
        if name != "lm_head.weight":
            writer.add_tensor(names.get_name(name, try_suffixes=(".weight",)), np.zeros(2, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize(("weights", "file_type"), [("f32", gguf.LlamaFileType.ALL_F32),
                                                    ("bf16", gguf.LlamaFileType.MOSTLY_BF16)])
def test_the_gguf_holds_the_policys_weights_with_the_source_metadata(tmp_path, weights, file_type):
    model = _tiny_llama()
    _source_gguf(tmp_path / "source.gguf", model)
    llamacpp.write_gguf(model, tmp_path / "source.gguf", tmp_path / "policy.gguf", weights)
    reader = gguf.GGUFReader(tmp_path / "policy.gguf")
    assert reader.fields["general.name"].contents() == "tiny"
    assert reader.fields["tokenizer.ggml.tokens"].contents() == [f"t{i}" for i in range(48)]
    assert reader.fields["general.file_type"].contents() == file_type
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    assert "output.weight" not in tensors  # tied: llama.cpp reuses the embedding
    undo = LlamaTensorProcessor({"num_attention_heads": 4, "num_key_value_heads": 2}).process
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    for name, parameter in model.state_dict().items():
        if name == "lm_head.weight":
            continue
        gguf_name = names.get_name(name, try_suffixes=(".weight",))
        tensor = tensors.pop(gguf_name)
        stored = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(parameter.shape)
        stored = undo(stored, gguf_name).weights
        expected = parameter.to(torch.bfloat16) if parameter.ndim > 1 and weights == "bf16" else parameter
        assert np.array_equal(stored, expected.float().numpy()), name
    assert not tensors
