"""Hardware detection on this machine, recommendations for machines we don't have, and resource limits."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from node.errors import NodeError
from node.learning import hardware
from node.learning.hardware import (
    PROMPT_TOKENS, GpuInfo, HardwareInfo, catalog_fits, cpu_bf16_units, detect, recommend, sequences_per_pass,
)
from node.learning.limits import apply_resource_limits
from node.learning.models import (
    BUNDLED,
    CATALOG,
    GIB,
    check_fits,
    estimate_training_bytes,
    fit_label,
    resolve,
    uses_adamw_8bit,
)
from tests.fresh_imports import run_and_list_imports, run_fresh


def machine(
    kind: str, *, ram_gib: float, free_gib: float, gpu: GpuInfo | None = None, bf16: bool = True
) -> HardwareInfo:
    return HardwareInfo(
        kind=kind,
        cpu_name="Apple M2 Pro" if kind == "mps" else "AMD Ryzen 9 7950X",
        physical_cores=8,
        logical_cores=16,
        total_ram_bytes=int(ram_gib * GIB),
        available_ram_bytes=int(free_gib * GIB),
        gpus=(gpu,) if gpu else (),
        torch_version="2.13.0",
        bf16_supported=bf16,
    )


def this_cpu() -> HardwareInfo:
    return replace(detect(), kind="cpu", gpus=())


RTX_4090 = machine("cuda", ram_gib=64, free_gib=48, gpu=GpuInfo("NVIDIA GeForce RTX 4090", 24 * GIB, (8, 9), 0))
H100 = machine("cuda", ram_gib=256, free_gib=200, gpu=GpuInfo("NVIDIA H100 80GB HBM3", 80 * GIB, (9, 0), 0))
GTX_1060 = machine(
    "cuda", ram_gib=16, free_gib=10, gpu=GpuInfo("NVIDIA GeForce GTX 1060 6GB", 6 * GIB, (6, 1), 0), bf16=False
)
MAC_16 = machine("mps", ram_gib=16, free_gib=11)
# A CPU laptop with fixed memory: what this machine has free changes from run to run (other programs, other tests).
CPU_LAPTOP = machine("cpu", ram_gib=32, free_gib=20)
MAC_64 = machine("mps", ram_gib=64, free_gib=48)


def memory_budget(hw: HardwareInfo) -> int:
    return hw.gpus[0].total_memory_bytes if hw.kind == "cuda" else hw.total_ram_bytes


# --- detect --------------------------------------------------------------------------------------------------


def test_detect_describes_this_machine():
    hw = detect()
    expected = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    assert hw.kind == expected
    assert 1 <= hw.physical_cores <= hw.logical_cores
    assert hw.total_ram_bytes >= GIB
    assert 0 < hw.available_ram_bytes <= hw.total_ram_bytes
    assert hw.cpu_name
    assert hw.torch_version == str(torch.__version__)
    assert isinstance(hw.bf16_supported, bool)
    assert len(hw.gpus) == (torch.cuda.device_count() if hw.kind == "cuda" else 0)
    as_json = json.loads(json.dumps(hw.to_dict()))
    assert as_json["kind"] == hw.kind and as_json["description"] == hw.describe()


@pytest.mark.skipif(sys.platform == "darwin", reason="MPS does not follow CUDA_VISIBLE_DEVICES")
def test_detect_without_visible_gpus_reports_a_cpu_machine():
    out = run_fresh("from node.learning.hardware import detect; print(detect().describe())", CUDA_VISIBLE_DEVICES="")
    assert out.startswith("CPU: ")
    assert "no GPU visible to torch" in out
    assert "GiB RAM" in out


def test_the_hardware_query_of_the_wizard_loads_no_sampler_and_no_model_classes():
    # The wizard's hardware page waits for `node hardware`: torch's device checks and the catalog, seconds less
    # than with the samplers and transformers' model classes (both of which a training node imports anyway).
    printed, imported = run_and_list_imports("from node.cli.main import main; print(main(['hardware']))",
                                             ("transformers", "node.learning.decoding"))
    assert printed[0].startswith(("CPU: ", "CUDA: ", "Apple GPU"))
    assert printed[-1] == "0"
    assert imported == []


def test_describe_names_the_gpu():
    assert "NVIDIA GeForce RTX 4090 (24.0 GiB, compute 8.9)" in RTX_4090.describe()
    assert "MPS" in MAC_16.describe()


ZEN4_FLAGS = "fpu vme sse2 avx2 avx512f avx512bw avx512_bf16 avx512_vnni"
SAPPHIRE_RAPIDS_FLAGS = "fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"


@pytest.mark.parametrize(("flags", "units"), [
    (ZEN4_FLAGS, ("AVX512-BF16",)),
    (SAPPHIRE_RAPIDS_FLAGS, ("AMX-BF16", "AVX512-BF16")),
    ("fpu sse2 avx avx2 fma f16c", ()),
])
def test_cpu_bf16_units_are_read_from_the_cpu_flags(tmp_path, flags, units):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: some CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    assert cpu_bf16_units(cpuinfo) == units
    assert cpu_bf16_units(tmp_path / "missing") == ()


def test_a_cpu_with_native_bf16_samples_in_bf16_and_says_so(monkeypatch):
    native = replace(CPU_LAPTOP, cpu_bf16_units=("AVX512-BF16",))
    rec = recommend(native)
    assert (rec.train_dtype, rec.generation_dtype) == ("float32", "bfloat16")
    assert "native bfloat16 (AVX512-BF16): samples completions in bfloat16" in native.describe()
    assert recommend(CPU_LAPTOP).generation_dtype == "float32"
    assert "no native bfloat16: samples completions in float32" in CPU_LAPTOP.describe()
    # and with what: ONNX Runtime where it is installed (training.sampler = "auto")
    monkeypatch.setattr(hardware, "onnxruntime_installed", lambda: True)
    assert "in float32, with ONNX Runtime where the model allows" in CPU_LAPTOP.describe()
    monkeypatch.setattr(hardware, "onnxruntime_installed", lambda: False)
    assert "in float32, with torch (onnxruntime is not installed)" in CPU_LAPTOP.describe()
    # the GPU decides where there is one: a pre-Ampere GPU samples in float32, MPS keeps float32
    for hw in (GTX_1060, MAC_16):
        assert recommend(replace(hw, cpu_bf16_units=("AMX-BF16",))).generation_dtype == "float32"


def test_generation_dtype_float32_turns_bf16_sampling_off():
    from node.runner import _pick_bf16

    native = replace(CPU_LAPTOP, cpu_bf16_units=("AMX-BF16",))
    assert _pick_bf16("auto", "cpu", native, sampling=True)
    assert not _pick_bf16("float32", "cpu", native, sampling=True)
    assert not _pick_bf16("auto", "cpu", native, sampling=False)  # training stays float32 on a CPU


# --- recommend -----------------------------------------------------------------------------------------------


def test_recommends_the_bundled_model_for_this_cpu():
    hw = this_cpu()
    rec = recommend(hw)
    assert (rec.model, rec.device, rec.train_dtype) == (BUNDLED, "cpu", "float32")
    # bf16 sampling where the CPU has bf16 matrix instructions; emulated bf16 was measured slower than float32
    assert rec.generation_dtype == ("bfloat16" if hw.cpu_bf16_units else "float32")
    assert rec.micro_batch_groups == 0
    assert (rec.num_generations, rec.local_questions, rec.external_groups, rec.max_new_tokens) == (4, 2, 2, 48)
    assert rec.threads == max(1, hw.physical_cores - 1)
    assert "GiB of RAM" in rec.reason and "offline" in rec.reason
    # the report shows the CPU above the reason (wizard, `rl-swarm hardware`): the reason does not name it again
    assert hw.cpu_name not in rec.reason and "CPU only" not in rec.reason


def test_recommends_a_qwen_model_in_bf16_for_a_24_gib_gpu():
    rec = recommend(RTX_4090)
    # 1.5B needs ~23.8 GiB of a GPU with 8-bit AdamW moments (bitsandbytes, the default where installed), ~32 with
    # float32 ones
    assert rec.model == ("Qwen/Qwen2.5-1.5B-Instruct" if uses_adamw_8bit("auto", lora=False, device="cuda")
                         else "Qwen/Qwen2.5-0.5B-Instruct")
    assert (rec.device, rec.train_dtype) == ("cuda", "bfloat16")
    assert (rec.num_generations, rec.local_questions, rec.external_groups) == (8, 4, 4)
    assert "RTX 4090" in rec.reason and "24.0 GiB" in rec.reason
    assert rec.threads == 7


def test_recommends_qwen_1_5b_for_an_80_gib_gpu():
    rec = recommend(H100)
    assert (rec.model, rec.train_dtype) == ("Qwen/Qwen2.5-1.5B-Instruct", "bfloat16")
    assert "H100" in rec.reason


def test_recommends_a_small_model_in_float32_for_a_6_gib_gpu_without_bf16():
    rec = recommend(GTX_1060)
    assert CATALOG[rec.model].params <= CATALOG["HuggingFaceTB/SmolLM2-360M-Instruct"].params
    assert (rec.device, rec.train_dtype, rec.generation_dtype) == ("cuda", "float32", "float32")
    assert "GTX 1060" in rec.reason and "float32" in rec.reason


def test_recommends_float32_on_a_16_gib_mac_and_says_why():
    rec = recommend(MAC_16)
    assert rec.model == "Qwen/Qwen2.5-0.5B-Instruct"  # a 0.5B full fine-tune in float32 fits a 16 GiB laptop
    assert (rec.device, rec.train_dtype) == ("mps", "float32")
    assert "Apple GPU" in rec.reason and "16.0 GiB" in rec.reason and "bfloat16 training on MPS is unreliable" in rec.reason


def test_recommends_qwen_0_5b_on_a_64_gib_mac():
    assert recommend(MAC_64).model == "Qwen/Qwen2.5-0.5B-Instruct"


@pytest.mark.parametrize(
    "hw",
    [CPU_LAPTOP, RTX_4090, H100, GTX_1060, MAC_16, MAC_64],
    ids=["cpu-laptop", "rtx4090", "h100", "gtx1060", "mac16", "mac64"],
)
def test_recommended_model_passes_the_fit_check(hw):
    rec = recommend(hw)
    check_fits(
        resolve(rec.model),
        available_bytes=memory_budget(hw),
        train_dtype=rec.train_dtype,
        num_sequences=sequences_per_pass(rec),  # what the node checks at start, not just G
        seq_len=PROMPT_TOKENS + rec.max_new_tokens,
        adamw_8bit=uses_adamw_8bit("auto", lora=False, device=rec.device),  # the node's default optimizer_states
        cuda=rec.device == "cuda",
    )


@given(
    kind=st.sampled_from(["cuda", "mps", "cpu"]),
    memory_gib=st.floats(1, 200),
    cores=st.integers(1, 128),
    bf16=st.booleans(),
)
def test_recommendation_fits_unless_nothing_does(kind, memory_gib, cores, bf16):
    gpu = GpuInfo("Some GPU", int(memory_gib * GIB), (8, 0), 0) if kind == "cuda" else None
    hw = replace(machine(kind, ram_gib=memory_gib, free_gib=memory_gib, gpu=gpu, bf16=bf16), physical_cores=cores)
    rec = recommend(hw)
    assert rec.model in CATALOG and rec.device == kind and rec.reason
    assert 1 <= rec.threads <= cores
    settings = {"num_sequences": sequences_per_pass(rec), "seq_len": PROMPT_TOKENS + rec.max_new_tokens,
                "adamw_8bit": uses_adamw_8bit("auto", lora=False, device=kind), "cuda": kind == "cuda"}
    smallest = estimate_training_bytes(
        CATALOG[BUNDLED].params, train_dtype=rec.train_dtype, vocab_size=CATALOG[BUNDLED].vocab_size, **settings
    )
    if fit_label(smallest, memory_budget(hw)) != "won't fit":
        chosen = CATALOG[rec.model]
        needed = estimate_training_bytes(
            chosen.params, train_dtype=rec.train_dtype, vocab_size=chosen.vocab_size, **settings
        )
        assert fit_label(needed, memory_budget(hw)) != "won't fit"


@pytest.mark.parametrize("hw", [CPU_LAPTOP, RTX_4090, GTX_1060, MAC_16], ids=["cpu-laptop", "rtx4090", "gtx1060", "mac16"])
def test_model_picker_labels_agree_with_the_recommendation(hw):
    rec = recommend(hw)
    fits = {fit.id: fit for fit in catalog_fits(hw, rec)}
    assert set(fits) == set(CATALOG)
    assert fits[rec.model].label != "won't fit"
    assert fits[BUNDLED].download_bytes == 0
    sizes = [fits[m].required_bytes for m in CATALOG]
    assert sizes == sorted(sizes, reverse=True)  # the catalog is largest first, so are the estimates


@pytest.mark.parametrize("reference", [False, True], ids=["beta-0", "kl-reference"])
@pytest.mark.parametrize("eight_bit", [True, False], ids=["8bit-moments", "float32-moments"])
@pytest.mark.parametrize("hw", [CPU_LAPTOP, RTX_4090], ids=["cpu", "cuda"])
def test_the_apps_torch_free_figure_is_the_nodes_estimate_for_any_round_shape(hw, eight_bit, reference, monkeypatch):
    # On CUDA with float32 moments the optimizer step, not the forward/backward, decides short rounds: the floor.
    # With beta > 0 the KL's reference model adds the same bytes to every round shape.
    from app import fit as app_fit
    from node.learning import hardware

    monkeypatch.setattr(hardware, "uses_adamw_8bit", lambda *a, **k: eight_bit)
    rec = recommend(hw)
    for fit in catalog_fits(hw, rec):
        for sequences, new_tokens in ((1, 8), (4, 48), (16, 128), (64, 1024), (256, 4096)):
            node_figure = hardware._required_bytes(fit.id, rec.device, rec.train_dtype, sequences, new_tokens,
                                                   generation_dtype=rec.generation_dtype, starting_copy=reference)
            app_figure = app_fit.required(fit, sequences_per_pass=sequences, max_new_tokens=new_tokens,
                                          reference=reference)
            # within rounding: the slope is whole bytes a token
            assert app_figure == pytest.approx(node_figure, rel=1e-4), (fit.id, sequences, new_tokens)


def test_hardware_json_lists_the_catalog_with_fit_labels():
    out = subprocess.run([sys.executable, "-m", "node", "hardware", "--json"], capture_output=True, text=True, timeout=120)
    data = json.loads(out.stdout)
    assert {m["id"] for m in data["models"]} == set(CATALOG)
    assert {m["label"] for m in data["models"]} <= {"fits", "tight", "won't fit"}
    assert data["recommendation"]["model"] in CATALOG


# --- resource limits -----------------------------------------------------------------------------------------


def test_apply_resource_limits_sets_torch_threads():
    # In a child process: torch's inter-op pool can be sized only once per process.
    out = run_fresh(
        "import json, os, psutil, torch\n"
        "from node.learning.limits import apply_resource_limits\n"
        "default = apply_resource_limits(threads=None, gpu_memory_fraction=None, device='cpu')\n"
        "physical = psutil.cpu_count(logical=False) or psutil.cpu_count()\n"
        "again = apply_resource_limits(threads=1, gpu_memory_fraction=0.5, device='cpu')\n"
        "print(json.dumps([default, again, physical, torch.get_num_threads(), os.environ['OMP_NUM_THREADS'],"
        " os.environ['MKL_NUM_THREADS']]))"
    )
    default, again, physical, threads, omp, mkl = json.loads(out)
    expected = max(1, physical - 1)
    assert default == {"threads": expected, "interop_threads": expected, "gpu_memory_fraction": None}
    # The inter-op pool keeps its first size; a fraction means nothing on a CPU device.
    assert again == {"threads": 1, "interop_threads": expected, "gpu_memory_fraction": None}
    assert (threads, omp, mkl) == (1, "1", "1")


@pytest.mark.parametrize(
    "threads, fraction", [(0, None), (-2, None), (1.5, None), (True, None), (1, 0.0), (1, 1.5), (1, -0.1)]
)
def test_apply_resource_limits_rejects_bad_values(threads, fraction):
    with pytest.raises(NodeError) as caught:
        apply_resource_limits(threads=threads, gpu_memory_fraction=fraction, device="cuda")
    assert caught.value.hint
