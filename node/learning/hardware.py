"""What this machine can train, and the settings we recommend for it.

Recommendation policy (memory is the GPU's for CUDA and the total RAM otherwise; see
:func:`node.learning.models.estimate_training_bytes`):

* CUDA, >= 20 GiB: Qwen2.5-1.5B-Instruct in bfloat16, G=8 completions per question, I=4 local questions and
  J=4 groups from peers per round, 256 new tokens.
* CUDA, 8-20 GiB: Qwen2.5-0.5B-Instruct, same round shape.
* CUDA, < 8 GiB: SmolLM2-360M-Instruct, G=4, I=2, J=2.
  CUDA trains in bfloat16 where the GPU supports it (compute capability >= 8.0), float32 otherwise: float16
  training would need loss scaling.
* Apple MPS: Qwen2.5-0.5B-Instruct in float32 (bfloat16 training on MPS is unreliable), G=4, I=2, J=2.
* CPU only: the bundled SmolLM2-135M (offline) in float32, G=4, I=2, J=2, 128 new tokens; a round takes about a
  minute on two cores, where a 0.5B model takes many minutes.

Completions are sampled in bfloat16 on CUDA and on CPUs with native bfloat16 (AVX512-BF16 or AMX), from a copy
of the float32 policy, in the training dtype elsewhere. When the estimate says the tier's model won't fit, the next smaller model of
Qwen2.5-1.5B > Qwen2.5-0.5B > SmolLM2-360M > bundled is taken: with float32 master weights (and float32 AdamW
states where bitsandbytes is missing) most GPUs near a tier's lower bound get the next model down. On CUDA the
estimate is of what the GPU holds: the caching allocator's reserved memory and the CUDA context, not only tensors
(docs/performance.md, "On an NVIDIA GPU", has each model's figure).
The fit check assumes one group (G sequences) per forward/backward pass (TRL's per-device batch) and a prompt of
up to :data:`PROMPT_TOKENS` tokens. Torch gets all physical cores but one, so the machine stays usable.
"""

from __future__ import annotations

import importlib.util
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import psutil
import torch

from node.api import LORA_RANK, ModelFit, Recommendation, default_threads
from node.learning.models import (
    BUNDLED,
    CATALOG,
    GIB,
    estimate_training_bytes,
    fit_label,
    uses_adamw_8bit,
    weights_dtype,
)

PROMPT_TOKENS = 256  # a reasoning-gym question in the chat template; completions come on top

QWEN_1_5B = "Qwen/Qwen2.5-1.5B-Instruct"
QWEN_0_5B = "Qwen/Qwen2.5-0.5B-Instruct"
SMOLLM_360M = "HuggingFaceTB/SmolLM2-360M-Instruct"
_FALLBACKS = (QWEN_1_5B, QWEN_0_5B, SMOLLM_360M, BUNDLED)


@dataclass(frozen=True)
class GpuInfo:
    name: str
    total_memory_bytes: int
    compute_capability: tuple[int, int]
    index: int


@dataclass(frozen=True)
class HardwareInfo:
    kind: Literal["cuda", "mps", "cpu"]
    cpu_name: str
    physical_cores: int
    logical_cores: int
    total_ram_bytes: int
    available_ram_bytes: int
    gpus: tuple[GpuInfo, ...]  # empty unless kind is "cuda"
    torch_version: str
    bf16_supported: bool  # on the device of `kind`
    # The CPU's bfloat16 matrix instructions (cpu_bf16_units), empty where it has none: torch then emulates
    # bfloat16, slower than float32.
    cpu_bf16_units: tuple[str, ...] = ()

    def describe(self) -> str:
        cpu = f"{self.physical_cores} cores, {self.total_ram_bytes / GIB:.1f} GiB RAM"
        if self.kind == "cuda":
            gpus = ", ".join(
                f"{gpu.name} ({gpu.total_memory_bytes / GIB:.1f} GiB, compute {gpu.compute_capability[0]}."
                f"{gpu.compute_capability[1]})"
                for gpu in self.gpus
            )
            return f"CUDA: {gpus}; CPU: {cpu}; {self.vllm_description()}"
        if self.kind == "mps":
            return f"Apple GPU (MPS) sharing {self.total_ram_bytes / GIB:.1f} GiB RAM; CPU: {self.cpu_name}, {cpu}"
        return f"CPU: {self.cpu_name}, {cpu} (no GPU visible to torch); {self.cpu_bf16_description()}"

    def cpu_bf16_description(self) -> str:
        if self.cpu_bf16_units:
            return f"native bfloat16 ({', '.join(self.cpu_bf16_units)}): samples completions in bfloat16"
        if onnxruntime_installed():
            return "no native bfloat16: samples completions in float32, with ONNX Runtime where the model allows"
        return "no native bfloat16: samples completions in float32, with torch (onnxruntime is not installed)"

    def vllm_description(self) -> str:
        """Whether ``training.sampler = "vllm"`` can sample here (asked for only: ``auto`` samples with torch)."""
        from node.learning import vllm_decoding  # here: a CPU's hardware query never imports the samplers

        version = vllm_decoding.version()
        if version is None:
            return "samples with torch (vLLM is not installed: pip install vllm, then training.sampler = vllm)"
        return f"samples with torch, or with vLLM {version} (installed) where training.sampler = vllm"

    def to_dict(self) -> dict:
        return {**asdict(self), "description": self.describe()}


def onnxruntime_installed() -> bool:
    """Whether ONNX Runtime and onnx are installed, with which :mod:`node.learning.ort_decoding` samples on a CPU
    (asked here, so that the wizard's hardware query imports no sampler)."""
    return importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None


def detect() -> HardwareInfo:
    memory = psutil.virtual_memory()
    logical = psutil.cpu_count() or 1
    if torch.cuda.is_available():
        kind = "cuda"
        gpus = tuple(_gpu(index) for index in range(torch.cuda.device_count()))
        # Pre-Ampere GPUs only emulate bfloat16, far slower than float32.
        bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    elif torch.backends.mps.is_available():
        kind, gpus = "mps", ()
        # Every torch we support (>= 2.6) has bfloat16 kernels on MPS; Metal provides them from macOS 14.
        bf16 = torch.backends.mps.is_macos_or_newer(14, 0)
    else:
        kind, gpus = "cpu", ()
        bf16 = _cpu_bf16_matmul_works()
    return HardwareInfo(
        kind=kind,
        cpu_name=_cpu_name(),
        physical_cores=psutil.cpu_count(logical=False) or logical,
        logical_cores=logical,
        total_ram_bytes=memory.total,
        available_ram_bytes=memory.available,
        gpus=gpus,
        torch_version=str(torch.__version__),
        bf16_supported=bf16,
        cpu_bf16_units=cpu_bf16_units(),
    )


def _gpu(index: int) -> GpuInfo:
    props = torch.cuda.get_device_properties(index)
    return GpuInfo(props.name, props.total_memory, (props.major, props.minor), index)


def _cpu_bf16_matmul_works() -> bool:
    try:
        ones = torch.ones(4, 4, dtype=torch.bfloat16)
        return bool(((ones @ ones) == 4).all())
    except RuntimeError:
        return False


# /proc/cpuinfo flags of bfloat16 matrix instructions, and how the hardware report names them.
_BF16_FLAGS = {"amx_bf16": "AMX-BF16", "avx512_bf16": "AVX512-BF16"}


def cpu_bf16_units(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, ...]:
    """The x86 CPU's native bfloat16 matrix instructions (AMX, AVX512-BF16), from the kernel's CPU flags.

    Linux only (Windows runs the node in WSL2, which shows the host's flags); elsewhere none are reported and
    sampling stays float32 unless ``generation_dtype`` asks for bfloat16. ARM's BF16 extension is left out: torch's
    CPU kernels were not measured to gain from it.
    """
    if not cpuinfo.is_file():
        return ()
    for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return tuple(name for flag, name in _BF16_FLAGS.items() if flag in flags)
    return ()


def cpu_bf16_report() -> dict:
    """What bench results record about the CPU's bfloat16: the flags found and torch's own CPU capability."""
    return {"units": list(cpu_bf16_units()), "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def _cpu_name() -> str:
    # platform.processor() is empty on Linux and just "arm" on Apple silicon, hence the OS-specific sources.
    if sys.platform == "darwin":
        result = subprocess.run(
            ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, check=False
        )
        if result.stdout.strip():
            return result.stdout.strip()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def auto_bf16(hw: HardwareInfo, device: str, *, sampling: bool) -> bool:
    """bf16 training on CUDA only; bf16 sampling on CUDA and on CPUs with native bf16 matrix instructions.

    A CPU with AVX512-BF16 or AMX sampled the bundled model 1.5x faster from a bfloat16 copy (issue 35); CPUs
    without them emulate bfloat16, slower than float32, and float32 sampling needs no second copy of the weights.
    Apple's GPU (MPS) keeps float32: its bfloat16 is unreliable for training and was not measured for sampling.
    ``generation_dtype = "float32"`` (or ``"bfloat16"``) overrides this choice.
    """
    if device == "cuda":
        return hw.bf16_supported
    return sampling and device == "cpu" and bool(hw.cpu_bf16_units)



def _required_bytes(
    model: str, device: str, train_dtype: str, sequences_per_pass: int, max_new_tokens: int, lora_rank: int = 0,
    *, generation_dtype: str = "float32", starting_copy: bool = False,
) -> int:
    spec = CATALOG[model]
    weights = weights_dtype(device, lora=bool(lora_rank), bf16=train_dtype == "bfloat16")
    return estimate_training_bytes(
        spec.params,
        train_dtype=train_dtype,
        num_sequences=sequences_per_pass,
        seq_len=PROMPT_TOKENS + max_new_tokens,
        vocab_size=spec.vocab_size,
        lora_rank=lora_rank,
        adamw_8bit=uses_adamw_8bit("auto", lora=bool(lora_rank), device=device),  # the node's default optimizer_states
        sampling_copy=getattr(torch, generation_dtype) != weights,
        starting_copy=starting_copy,
        cuda=device == "cuda",
    )


def training_budget(hw: HardwareInfo) -> int:
    """Memory a training run may use: the first GPU's for CUDA, the computer's total RAM otherwise (MPS shares
    RAM).

    Total, not what happens to be free this second: other programs come and go, and a model that fits the machine
    should not be refused because a browser is open. fit_label calls anything past 70 % of it "tight".
    """
    return hw.gpus[0].total_memory_bytes if hw.kind == "cuda" else hw.total_ram_bytes


def sequences_per_pass(advice: Recommendation) -> int:
    """Completions in one forward/backward pass, as the node's fit check counts them: (micro batch or I+J) x G."""
    groups = advice.local_questions + advice.external_groups
    return min(advice.micro_batch_groups or groups, groups) * advice.num_generations


# Tokens in one pass large enough that the forward/backward decides the round's peak for every catalog model (its
# activations then outweigh the optimizer step's square roots on CUDA).
_SLOPE_TOKENS = 1 << 16


def catalog_fits(hw: HardwareInfo, advice: Recommendation) -> list[ModelFit]:
    budget = training_budget(hw)
    per_pass = sequences_per_pass(advice)
    fits = []
    for spec in CATALOG.values():
        sampling = {"generation_dtype": advice.generation_dtype}
        need = _required_bytes(spec.id, advice.device, advice.train_dtype, per_pass, advice.max_new_tokens, **sampling)
        lora = _required_bytes(spec.id, advice.device, advice.train_dtype, per_pass, advice.max_new_tokens, LORA_RANK,
                               **sampling)
        floor = _required_bytes(spec.id, advice.device, advice.train_dtype, 0, 0, **sampling)
        # The slope and intercept of the forward/backward's peak, taken where it decides the estimate (a pass of
        # _SLOPE_TOKENS and of twice as many): below that the optimizer step or sampling may, which the floor covers.
        once, twice = (_required_bytes(spec.id, advice.device, advice.train_dtype, 1, n * _SLOPE_TOKENS - PROMPT_TOKENS,
                                       **sampling) for n in (1, 2))
        per_token = (twice - once) // _SLOPE_TOKENS
        reference = _required_bytes(spec.id, advice.device, advice.train_dtype, per_pass, advice.max_new_tokens,
                                    **sampling, starting_copy=True) - need
        fits.append(ModelFit(spec.id, spec.name, spec.description, spec.download_bytes, need, fit_label(need, budget),
                             lora, fit_label(lora, budget), once - per_token * _SLOPE_TOKENS, per_token, PROMPT_TOKENS,
                             floor, reference))
    return fits


def recommend(hw: HardwareInfo) -> Recommendation:
    budget = training_budget(hw)
    if hw.kind == "cuda":
        gpu = hw.gpus[0]
        dtype = "bfloat16" if hw.bf16_supported else "float32"
        where = f"With {budget / GIB:.1f} GiB of {gpu.name}'s memory"
        why = "" if hw.bf16_supported else "; this GPU has no bfloat16, so it trains in float32"
        if budget >= 20 * GIB:
            model, g, i, j = QWEN_1_5B, 8, 4, 4
        elif budget >= 8 * GIB:
            model, g, i, j = QWEN_0_5B, 8, 4, 4
        else:
            model, g, i, j = SMOLLM_360M, 4, 2, 2
        max_new_tokens = 256
        micro = 1  # one group per pass: the logits of a 150k vocabulary dominate GPU memory
    elif hw.kind == "mps":
        dtype = "float32"
        where = f"With {budget / GIB:.1f} GiB of RAM shared with the Apple GPU"
        why = "; it trains in float32 because bfloat16 training on MPS is unreliable"
        model, g, i, j, max_new_tokens = QWEN_0_5B, 4, 2, 2, 256
        micro = 1
    else:
        dtype = "float32"
        where = f"With {budget / GIB:.1f} GiB of RAM"  # the report names the CPU above the reason
        why = "; it works offline and keeps a round to about a minute, larger models would take many minutes"
        # The bundled model's answers after a worked example end by themselves in well under 48 tokens.
        model, g, i, j, max_new_tokens = BUNDLED, 4, 2, 2, 48
        micro = 0  # the whole round in one pass: fastest on CPU and it fits

    generation_dtype = "bfloat16" if auto_bf16(hw, hw.kind, sampling=True) else "float32"

    def required(candidate: str) -> int:
        return _required_bytes(candidate, hw.kind, dtype, (micro or i + j) * g, max_new_tokens,
                               generation_dtype=generation_dtype)

    preferred = model
    candidates = _FALLBACKS[_FALLBACKS.index(preferred) :]
    model = next((c for c in candidates if fit_label(required(c), budget) != "won't fit"), candidates[-1])
    need = required(model)
    fallback = ""
    if model != preferred:
        fallback = (
            f" {CATALOG[preferred].name} would need ~{required(preferred) / GIB:.1f} GiB, more than is available."
        )
    reason = (
        f"{where}, {CATALOG[model].name} in {dtype} needs ~{need / GIB:.1f} GiB to train "
        f"({fit_label(need, budget)}){why}.{fallback}"
    )
    return Recommendation(
        model=model,
        device=hw.kind,
        train_dtype=dtype,
        generation_dtype=generation_dtype,
        num_generations=g,
        local_questions=i,
        external_groups=j,
        max_new_tokens=max_new_tokens,
        micro_batch_groups=micro,
        threads=default_threads(hw.physical_cores),
        reason=reason,
    )
