"""Model references, the memory estimate, and loading: the bundled GGUF is converted once and matches the original."""

from __future__ import annotations

import json
import shutil
import re
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from node.errors import NodeError
from node.learning.models import (
    BUNDLED,
    CATALOG,
    GIB,
    ResolvedModel,
    check_fits,
    estimate_training_bytes,
    fit_label,
    load,
    resolve,
    uses_adamw_8bit,
)
from tests.overlap import count_overlap, run_at_once
from tests.tiny_model import tiny_random

QWEN_0_5B = "Qwen/Qwen2.5-0.5B-Instruct"
QWEN_1_5B = "Qwen/Qwen2.5-1.5B-Instruct"


def bundled_gguf_path() -> Path:
    bundled = resolve(BUNDLED)
    return Path(bundled.path_or_id) / bundled.gguf_file


# --- resolve -------------------------------------------------------------------------------------------------


def test_resolve_bundled_finds_the_packaged_gguf():
    bundled = resolve(BUNDLED)
    assert bundled.kind == "bundled"
    assert bundled.gguf_file.endswith(".gguf")
    assert bundled_gguf_path().is_file()
    assert bundled.params == CATALOG[BUNDLED].params == 134_515_008


def test_resolve_a_model_folder(tiny_model_dir):
    resolved = resolve(str(tiny_model_dir))
    assert resolved.kind == "local_dir"
    assert resolved.path_or_id == str(tiny_model_dir)
    assert resolved.gguf_file is None
    assert resolved.vocab_size == 49_152
    # Embeddings dominate the tiny model: 49152 x 64, tied.
    assert 49_152 * 64 < resolved.params < 2 * 49_152 * 64


def test_resolve_a_gguf_file_counts_its_parameters():
    resolved = resolve(str(bundled_gguf_path()))
    assert resolved.kind == "gguf"
    assert Path(resolved.path_or_id) / resolved.gguf_file == bundled_gguf_path()
    assert resolved.params == CATALOG[BUNDLED].params
    assert resolved.vocab_size == 49_152


def test_resolve_hub_ids():
    catalog = resolve("Qwen/Qwen2.5-0.5B-Instruct")
    assert (catalog.kind, catalog.path_or_id, catalog.params) == ("hub", "Qwen/Qwen2.5-0.5B-Instruct", 494_032_768)
    unknown = resolve("someone/their-model")
    assert (unknown.kind, unknown.params) == ("hub", None)


@pytest.mark.parametrize("ref", ["", "not a model!!", "a/b/c", "owner/na--me", "/no/such/model.gguf"])
def test_resolve_rejects_garbage_with_a_hint(ref):
    with pytest.raises(NodeError) as caught:
        resolve(ref)
    assert BUNDLED in caught.value.hint


def test_resolve_rejects_a_file_that_is_not_gguf(tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"not a gguf file " * 8)
    with pytest.raises(NodeError, match="not a valid GGUF file"):
        resolve(str(fake))


def test_resolve_rejects_a_folder_without_config(tmp_path):
    with pytest.raises(NodeError, match="config.json"):
        resolve(str(tmp_path))


def test_catalog_sizes_are_plausible():
    for spec in CATALOG.values():
        assert 100e6 < spec.params < 2e9
        assert spec.description and spec.family and spec.name
        if spec.id != BUNDLED:
            assert resolve(spec.id).kind == "hub"
            # bf16 safetensors: 2 bytes a parameter, more where tied embeddings are stored twice.
            assert 1.9 <= spec.download_bytes / spec.params <= 2.6


# --- memory estimate and fit check ---------------------------------------------------------------------------


def test_no_catalog_description_names_a_memory_size():
    """The memory a model needs is computed for the machine at hand and shown beside the description; a fixed figure
    in the text (say, a GPU's) contradicts it on every other machine."""
    assert not [spec.id for spec in CATALOG.values() if re.search(r"\d\s*[GM]i?B", spec.description)]


def test_fit_label_thresholds():
    assert fit_label(70, 100) == "fits"
    assert fit_label(71, 100) == "tight"
    assert fit_label(100, 100) == "tight"
    assert fit_label(101, 100) == "won't fit"


@given(
    params=st.integers(1_000_000, 10_000_000_000),
    sequences=st.integers(1, 64),
    seq_len=st.integers(16, 4096),
    vocab=st.integers(1_000, 300_000),
    dtype=st.sampled_from(["float32", "bfloat16"]),
)
def test_estimate_grows_with_every_input(params, sequences, seq_len, vocab, dtype):
    def estimate(**changed):
        args = {"train_dtype": dtype, "num_sequences": sequences, "seq_len": seq_len, "vocab_size": vocab}
        return estimate_training_bytes(changed.pop("params", params), **{**args, **changed})

    base = estimate()
    # Optimizer state alone is 16 bytes a parameter (fp32 weights, grads and two AdamW moments).
    assert base > 16 * params
    assert estimate(params=params * 2) > base
    assert estimate(num_sequences=sequences + 1) > base
    assert estimate(seq_len=seq_len + 1) > base
    assert estimate(vocab_size=vocab + 1) > base


def test_check_fits_refuses_a_large_model_and_names_a_smaller_one():
    settings = {"train_dtype": "bfloat16", "num_sequences": 4, "seq_len": 384}
    with pytest.raises(NodeError) as caught:
        check_fits(resolve(QWEN_1_5B), available_bytes=4 * GIB, **settings)
    error = caught.value
    assert error.code == "model_too_large"
    assert "Qwen2.5-1.5B" in error.message and "has 4.0 GiB" in error.message
    suggested = [spec for spec in CATALOG.values() if repr(spec.id) in error.hint]
    assert len(suggested) == 1
    # Named as Settings and the wizard name them (the app shows this hint), the config keys only in brackets.
    assert f"choose the smaller model {suggested[0].name} in Settings" in error.hint
    assert "fewer completions per question or fewer max tokens in Settings" in error.hint
    assert "lower num_generations" not in error.hint
    assert "lora_rank" not in error.hint or "setup wizard" in error.hint
    assert suggested[0].params < CATALOG[QWEN_1_5B].params
    check_fits(resolve(suggested[0].id), available_bytes=4 * GIB, **settings)


def test_check_fits_offers_8bit_moments_where_only_they_fit():
    settings = {"train_dtype": "float32", "num_sequences": 4, "seq_len": 384}
    params = CATALOG[QWEN_0_5B].params
    full = estimate_training_bytes(params, **settings)
    quantized = estimate_training_bytes(params, **settings, adamw_8bit=True)
    between = (full + quantized) // 2  # fits "tight" below 100 % of the budget: a budget just under the full need
    with pytest.raises(NodeError) as caught:
        check_fits(resolve(QWEN_0_5B), available_bytes=between, **settings)
    assert 'optimizer_states = "8bit"' in caught.value.hint
    check_fits(resolve(QWEN_0_5B), available_bytes=between, **settings, adamw_8bit=True)


@pytest.mark.parametrize(
    ("states", "lora", "device", "expected"),
    [
        ("auto", False, "cpu", True),  # the moments are a full fine-tune's largest item (docs/performance.md, "Memory")
        ("auto", False, "cuda", True),
        ("auto", False, "mps", False),  # bitsandbytes has no 8-bit optimizer kernel for Apple's GPU
        ("auto", True, "cpu", False),  # an adapter's moments are megabytes
        ("float32", False, "cpu", False),
        ("8bit", True, "mps", True),
    ],
)
def test_auto_keeps_8bit_moments_for_full_fine_tuning_on_cpu_and_cuda(states, lora, device, expected, monkeypatch):
    monkeypatch.setattr("node.learning.models._has_bitsandbytes", lambda: True)
    assert uses_adamw_8bit(states, lora=lora, device=device) is expected


def test_auto_falls_back_to_float32_moments_without_bitsandbytes(monkeypatch):
    monkeypatch.setattr("node.learning.models._has_bitsandbytes", lambda: False)
    assert uses_adamw_8bit("auto", lora=False, device="cpu") is False
    with pytest.raises(NodeError, match="bitsandbytes"):
        uses_adamw_8bit("8bit", lora=False, device="cpu")


def test_check_fits_accepts_a_small_model_with_plenty_of_memory():
    check_fits(
        resolve("HuggingFaceTB/SmolLM2-135M-Instruct"),
        available_bytes=24 * GIB,
        train_dtype="float32",
        num_sequences=16,
        seq_len=384,
    )


def test_check_fits_skips_models_of_unknown_size():
    unknown = ResolvedModel("someone/model", "hub", "someone/model", None, None)
    check_fits(unknown, available_bytes=1, train_dtype="float32", num_sequences=64, seq_len=4096)


# --- loading -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="module")
def conversion(model_cache) -> tuple[tuple, int]:
    """The bundled model loaded once for the module (this is the one GGUF conversion of the file), and how many times
    the conversion parsed the file."""
    parses = []

    class CountedReader(gguf.GGUFReader):
        def __init__(self, *args, **kwargs):
            parses.append(args)
            super().__init__(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf, "GGUFReader", CountedReader)
        loaded = load(resolve(BUNDLED), cache_dir=model_cache, dtype=torch.float32, device="cpu")
        assert gguf.GGUFReader is CountedReader  # the conversion put back what it found
    return loaded, len(parses)


@pytest.fixture(scope="module")
def bundled(conversion):
    return conversion[0]


@pytest.mark.slow
def test_bundled_model_is_converted_once_and_reused(bundled, conversion, model_cache):
    # the tokenizer, the config and the weights from one parse of the file: parsing it is most of a conversion
    assert conversion[1] == 1
    (converted,) = (model_cache / "converted").iterdir()  # no staging folder left behind
    assert converted.name.startswith(bundled_gguf_path().stem)
    weights = converted / "model.safetensors"
    before = weights.stat()

    model, _ = load(resolve(BUNDLED), cache_dir=model_cache, dtype=torch.float32, device="cpu")

    assert list((model_cache / "converted").iterdir()) == [converted]
    after = weights.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert model.config.vocab_size == 49_152


@pytest.mark.slow
def test_converted_model_is_a_plain_model_that_saves(bundled, tmp_path):
    model, tokenizer = bundled
    assert getattr(model, "hf_quantizer", None) is None
    assert not getattr(model, "is_quantized", False)
    assert "quantization_config" not in model.config.to_dict()
    model.save_pretrained(tmp_path)
    assert "quantization_config" not in json.loads((tmp_path / "config.json").read_text())
    assert tokenizer.pad_token is not None and tokenizer.padding_side == "left"
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id


@pytest.mark.slow
def test_converted_logits_match_the_dequantized_gguf(bundled):
    model, tokenizer = bundled
    gguf_path = bundled_gguf_path()
    original = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    inputs = tokenizer("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        expected = original(**inputs).logits
        actual = model(**inputs).logits
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)


def test_tiny_random_model_loads_and_generates(tiny_model_dir, tmp_path):
    model, tokenizer = load(resolve(str(tiny_model_dir)), cache_dir=tmp_path, dtype=torch.float32, device="cpu")
    assert model.config.vocab_size == len(tokenizer) == 49_152
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    output = model.generate(**prompt, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert output.shape[1] == prompt["input_ids"].shape[1] + 4


def test_loads_in_one_process_take_turns(tiny_model_dir, tmp_path, monkeypatch):
    """transformers' from_pretrained switches weight tying off class-wide while it loads; overlapping loads (nodes in
    threads) used to leave it off for the whole process, and every later model had a meta lm_head."""
    from transformers import AutoModelForCausalLM

    most = count_overlap(monkeypatch, AutoModelForCausalLM, "from_pretrained")
    loaded = run_at_once(lambda name: load(resolve(str(tiny_model_dir)), cache_dir=tmp_path / name,
                                           dtype=torch.float32, device="cpu")[0], "abc")
    assert max(most) == 1 and len(loaded) == 3
    for model in loaded:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_tiny_random_is_deterministic(tiny_model_dir, tmp_path):
    # The first tiny model's folder carries the bundled tokenizer, so it can seed a second one quickly.
    again = tiny_random(resolve(str(tiny_model_dir)), tmp_path / "again")
    first, second = load_file(tiny_model_dir / "model.safetensors"), load_file(again / "model.safetensors")
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)


def test_loading_from_an_unreachable_hub_says_how_to_work_offline(tmp_path):
    # conftest sets HF_HUB_OFFLINE; with a network the made-up id fails as not found instead.
    missing = resolve("rl-swarm-desktop-tests/no-such-model")
    with pytest.raises(NodeError, match="could not download rl-swarm-desktop-tests/no-such-model") as caught:
        load(missing, cache_dir=tmp_path, dtype=torch.float32, device="cpu")
    assert "HF_HUB_OFFLINE" in caught.value.hint and BUNDLED in caught.value.hint


def test_a_base_model_without_a_chat_template_is_refused_before_its_weights_load(tiny_model_dir, tmp_path,
                                                                                  monkeypatch):
    """The node asks its questions as a chat: a base model (Gemma 3 270M's GGUF, say) used to crash at its first
    prompt with transformers' traceback."""
    from transformers import AutoModelForCausalLM

    base = tmp_path / "base-model"
    shutil.copytree(tiny_model_dir, base)
    (base / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((base / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (base / "tokenizer_config.json").write_text(json.dumps(config))
    weights = []
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **k: weights.append(a))
    with pytest.raises(NodeError, match="base-model has no chat template") as caught:
        load(resolve(str(base)), cache_dir=tmp_path / "cache", dtype=torch.float32, device="cpu")
    assert caught.value.code == "no_chat_template" and "-Instruct" in caught.value.hint
    assert weights == []


def test_loading_a_folder_without_weights_says_what_is_missing(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 32}))
    with pytest.raises(NodeError, match="could not load the model") as caught:
        load(resolve(str(tmp_path)), cache_dir=tmp_path / "cache", dtype=torch.float32, device="cpu")
    assert "save_pretrained" in caught.value.hint


def test_loading_a_gguf_transformers_cannot_read_leaves_no_half_converted_folder(tmp_path):
    path = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(path, "not-a-real-architecture")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b", "c"])
    writer.add_tensor("token_embd.weight", np.zeros((3, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    odd = resolve(str(path))
    assert (odd.kind, odd.params, odd.vocab_size) == ("gguf", 12, 3)

    with pytest.raises(NodeError, match="could not read the model in odd.gguf") as caught:
        load(odd, cache_dir=tmp_path / "cache", dtype=torch.float32, device="cpu")
    assert "architecture" in caught.value.hint
    assert list((tmp_path / "cache" / "converted").iterdir()) == []


def test_a_sampling_copy_counts_only_where_one_is_made():
    """An adapter's base weights are frozen: its peak is the bfloat16 sampling copy where float32 weights are
    sampled in bfloat16 (CUDA), and the training pass where they are sampled as they are (CPU)."""
    params = 494_032_768
    args = {"train_dtype": "float32", "num_sequences": 4, "seq_len": 304, "lora_rank": 16}
    as_they_are = estimate_training_bytes(params, **args)
    from_a_copy = estimate_training_bytes(params, **args, sampling_copy=True)
    assert from_a_copy - as_they_are > 1.5 * params
    full = {**args, "lora_rank": 0}  # a full fine-tune's step needs more than sampling from a copy does
    assert estimate_training_bytes(params, **full, sampling_copy=True) == estimate_training_bytes(params, **full)


def test_the_onnxruntime_sampler_s_packed_copy_counts_where_it_is_the_peak():
    """ONNX Runtime's sampler holds its own prepacked copy of the float32 weights while a generation runs (measured
    7.1 bytes a parameter above the RSS before the call for the bundled model): the bundled model's default round
    (full fine-tune, 8-bit moments) peaks there, not in its training step, and a machine between the two estimates
    is refused with that sampler only."""
    params = CATALOG[BUNDLED].params
    args = {"train_dtype": "float32", "num_sequences": 4, "seq_len": 304, "adamw_8bit": True}
    torch_loop = estimate_training_bytes(params, **args, vocab_size=CATALOG[BUNDLED].vocab_size)
    onnxruntime = estimate_training_bytes(params, **args, vocab_size=CATALOG[BUNDLED].vocab_size,
                                          onnxruntime_sampler=True)
    assert onnxruntime > torch_loop  # sampling, not the training step, is now the peak
    assert onnxruntime >= (4 + 2 + 7) * params  # the weights, 8-bit moments, the sampler's copy (measured 7.1)
    between = (torch_loop + onnxruntime) // 2
    check_fits(resolve(BUNDLED), available_bytes=between, **args)
    with pytest.raises(NodeError, match="needs ~") as caught:
        check_fits(resolve(BUNDLED), available_bytes=between, **args, onnxruntime_sampler=True)
    assert f"~{onnxruntime / GIB:.1f} GiB" in str(caught.value)
