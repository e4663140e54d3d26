"""The node's round on an NVIDIA GPU: GPU memory against the fit estimate, seconds per phase, and the torch sampler
against transformers' ``generate()``, per catalog model.

The Hub is unreachable here, so each model is its shape twin (:mod:`bench.shape_twin`: the architecture with
random weights). Random weights never end a completion, so every completion runs to ``max_new_tokens``: the worst
case the fit estimate budgets, and the most work a round can do.

Each case runs in its own child process (so one case's cached blocks do not count in another's peak) and makes the
node's CUDA choices: bf16 autocast training over float32 master weights and a bfloat16 sampling copy where
:func:`node.learning.hardware.auto_bf16` says the GPU has bfloat16, 8-bit AdamW moments where bitsandbytes is
installed (:func:`node.learning.models.uses_adamw_8bit`), the learner on ``cuda``. The settings are what
:func:`node.learning.hardware.recommend` gives the GPU tier a model is recommended for (``--cases``), or the demo's.

Per round: the generation phase's and the training step's peak of ``torch.cuda.max_memory_allocated`` and
``max_memory_reserved``, and their seconds. The peak the GPU sees is the reserved peak plus the CUDA context,
measured once per child. Beside it: the node's own estimate of what the GPU holds
(:func:`node.learning.models.estimate_training_bytes` with ``cuda`` and the inputs of the node's fit check) and the
tier's memory. After the rounds, the round's I x G completions
from the node's sampler (:mod:`node.learning.decoding`) and from ``generate()`` on the same bfloat16 copy, in
turns: seconds and generated tokens per second.

    python bench/cuda.py --out bench/results/cuda.json                 # on a machine with an NVIDIA GPU
    python bench/cuda.py --cases qwen0.5b:10 --rounds 2 --tokenizer DIR  # one case; DIR: the bundled tokenizer

``--tokenizer`` names a folder with the bundled model's tokenizer files (for a machine without the bundled model);
by default it is loaded from the bundled model.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import shape_twin  # noqa: E402
from bench.memory import _demo_config, child_rows, demo_round_groups, demo_task_source  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

GIB = 2**30
DEMO = "demo"
# case name -> (catalog model, GPU memory in GiB or DEMO): the model hardware.recommend picks for a GPU of that
# many GiB, with the settings it gives it there; DEMO is the bundled model at the demo's settings, as
# `rl-swarm --demo` runs it on a GPU.
CASES = {
    "smollm135m:demo": ("HuggingFaceTB/SmolLM2-135M-Instruct", DEMO),
    "smollm360m:8": ("HuggingFaceTB/SmolLM2-360M-Instruct", 8),
    "qwen0.5b:10": ("Qwen/Qwen2.5-0.5B-Instruct", 10),
    "qwen1.5b:24": ("Qwen/Qwen2.5-1.5B-Instruct", 24),
}


def settings_for(tier, hw) -> dict:
    """The round's settings: the recommendation for a GPU of ``tier`` GiB (this GPU's report with its memory set to
    that), or the demo's."""
    import dataclasses

    from node.learning import hardware

    if tier == DEMO:
        training = _demo_config().training
        return {"G": training.num_generations, "I": training.local_questions, "J": training.external_groups,
                "max_new_tokens": training.max_new_tokens, "micro_batch_groups": training.micro_batch_groups,
                "generation_dtype": training.generation_dtype}
    if hw.kind == "cuda":
        gpu = dataclasses.replace(hw.gpus[0], total_memory_bytes=tier * GIB)
        hw = dataclasses.replace(hw, gpus=(gpu, *hw.gpus[1:]))
    else:  # the plumbing check: what a bfloat16 GPU of that size would be told
        gpu = hardware.GpuInfo("a GPU of the tier", tier * GIB, (8, 0), 0)
        hw = dataclasses.replace(hw, kind="cuda", gpus=(gpu,), bf16_supported=True)
    advice = hardware.recommend(hw)
    return {"G": advice.num_generations, "I": advice.local_questions, "J": advice.external_groups,
            "max_new_tokens": advice.max_new_tokens, "micro_batch_groups": advice.micro_batch_groups,
            "generation_dtype": advice.generation_dtype, "recommended_model": advice.model}


class _Memory:
    """The CUDA caching allocator's peaks since the last :meth:`take`; zeros on the CPU (a plumbing check)."""

    def __init__(self, device: str) -> None:
        import torch

        self.torch, self.cuda = torch, device == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def take(self) -> tuple[float, float]:
        """(peak allocated, peak reserved) in GiB since the last call."""
        if not self.cuda:
            return 0.0, 0.0
        cuda = self.torch.cuda
        cuda.synchronize()
        peaks = cuda.max_memory_allocated() / GIB, cuda.max_memory_reserved() / GIB
        cuda.reset_peak_memory_stats()
        return peaks


def child(case: str, args: argparse.Namespace) -> None:
    """Run one case in this process; print one JSON line per phase."""
    import torch

    from node.learning import hardware, models
    from node.learning.grpo import GrpoLearner, Policy

    def emit(**row) -> None:
        print(json.dumps(row), flush=True)

    model_id, tier = CASES[case]
    device = args.device
    hw = hardware.detect()
    if device == "cuda" and hw.kind != "cuda":
        raise SystemExit(f"no CUDA GPU here ({hw.describe()}); --device cpu checks the plumbing")
    context = 0
    if device == "cuda":
        torch.empty(1, device="cuda")
        free, total = torch.cuda.mem_get_info()
        context = total - free - torch.cuda.memory_reserved()
    memory = _Memory(device)
    settings = settings_for(tier, hw)
    mixed_bf16 = hardware.auto_bf16(hw, device, sampling=False)
    sampling_bf16 = (hardware.auto_bf16(hw, device, sampling=True) if settings["generation_dtype"] == "auto"
                     else settings["generation_dtype"] == "bfloat16")
    generation_dtype = torch.bfloat16 if sampling_bf16 else torch.float32
    adamw_8bit = models.uses_adamw_8bit("auto", lora=False, device=device)
    weights = models.weights_dtype(device, lora=False, bf16=mixed_bf16)
    spec = models.CATALOG[model_id]
    groups = settings["I"] + settings["J"]
    per_pass = min(settings["micro_batch_groups"] or groups, groups) * settings["G"]
    # The very estimate hardware.recommend judged the model by.
    estimate = hardware._required_bytes(model_id, device, "bfloat16" if mixed_bf16 else "float32", per_pass,
                                        settings["max_new_tokens"], generation_dtype=str(generation_dtype)[6:])
    emit(phase="start", case=case, model=model_id, tier_gib=tier, device=device,
         gpu=hw.gpus[0].name if hw.gpus else None, settings=settings,
         train_dtype="bfloat16" if mixed_bf16 else "float32", generation_dtype=str(generation_dtype)[6:],
         adamw_8bit=adamw_8bit, estimate_gib=estimate / GIB, context_gib=context / GIB, torch=torch.__version__)

    folder = shape_twin.twin_folder(model_id, Path(args.cache_dir))
    model, tokenizer = models.load(
        models.ResolvedModel(ref=model_id, kind="local_dir", path_or_id=str(folder), gguf_file=None,
                             params=spec.params),
        cache_dir=Path(args.cache_dir), dtype=weights, device=device,
    )
    policy = Policy(model, tokenizer, generation_dtype=generation_dtype, max_prompt_tokens=1024)
    work = Path(tempfile.mkdtemp(prefix="rl-swarm-cuda-"))
    learner = GrpoLearner(
        policy, output_dir=work / "trl", device=device, mixed_bf16=mixed_bf16, num_generations=settings["G"],
        max_new_tokens=settings["max_new_tokens"], learning_rate=5e-6, beta=0.0, epsilon=0.2, epsilon_high=0.28,
        loss_type="grpo", max_grad_norm=1.0, seed=0, micro_batch_groups=settings["micro_batch_groups"],
        lora=None, adamw_8bit=adamw_8bit,
    )
    allocated, reserved = memory.take()
    emit(phase="ready", peak_allocated_gib=allocated, peak_reserved_gib=reserved)

    tasks = demo_task_source(spec.params)
    for number in range(args.rounds):
        started = time.perf_counter()
        round_groups = demo_round_groups(policy, tasks, number, local=settings["I"], peer=settings["J"],
                                         generations=settings["G"], max_new_tokens=settings["max_new_tokens"])
        memory.sync()
        generate_s = time.perf_counter() - started
        generate = memory.take()
        started = time.perf_counter()
        stats = learner.step(round_groups)
        memory.sync()
        train_s = time.perf_counter() - started
        train = memory.take()
        emit(phase="round", round=number + 1, generate_s=generate_s, train_s=train_s,
             generated_tokens=sum(len(c.ids) for g in round_groups[: settings["I"]] for c in g.completions),
             trained_tokens=sum(len(c.ids) for g in round_groups for c in g.completions),
             generate_peak_allocated_gib=generate[0], generate_peak_reserved_gib=generate[1],
             train_peak_allocated_gib=train[0], train_peak_reserved_gib=train[1], grad_norm=stats.grad_norm)

    # The same I x G completions from the node's loop and from generate() on the same copy, in turns.
    prompts = [policy.prompt_ids(tasks.messages(task)) for task in tasks.sample(settings["I"], random.Random(7))]
    samplers = {"node loop (decoding.sample)": policy,
                "transformers generate()": Policy(model, tokenizer, generation_dtype=generation_dtype,
                                                  max_prompt_tokens=1024, preallocated_cache=False)}
    for repetition in range(args.repetitions):
        for name, sampler in samplers.items():
            memory.sync()
            started = time.perf_counter()
            out = sampler.generate(prompts, num_generations=settings["G"], max_new_tokens=settings["max_new_tokens"],
                                   temperature=1.0, top_p=1.0, seed=repetition)
            memory.sync()
            seconds = time.perf_counter() - started
            tokens = sum(len(c.ids) for g in out for c in g)
            emit(phase="sampler", sampler=name, repetition=repetition, seconds=seconds, tokens=tokens,
                 tokens_per_s=tokens / seconds)


def summarize(rows: list[dict]) -> dict:
    start = next(r for r in rows if r["phase"] == "start")
    ready = next(r for r in rows if r["phase"] == "ready")
    rounds = [r for r in rows if r["phase"] == "round"]
    # The first round pays for kernels' first launches (cuBLAS handles, autotuning): the later ones are the rate.
    steady = rounds[1:] or rounds
    peak_reserved = max([ready["peak_reserved_gib"]] + [max(r["generate_peak_reserved_gib"],
                                                            r["train_peak_reserved_gib"]) for r in rounds])
    peak_allocated = max([ready["peak_allocated_gib"]] + [max(r["generate_peak_allocated_gib"],
                                                              r["train_peak_allocated_gib"]) for r in rounds])
    samplers = {}
    for r in rows:
        if r["phase"] == "sampler":
            samplers.setdefault(r["sampler"], []).append(r["tokens_per_s"])
    median = lambda values: sorted(values)[len(values) // 2]  # noqa: E731
    summary = {
        "case": start["case"], "model": start["model"], "device": start["device"], "gpu": start["gpu"],
        "tier_gib": start["tier_gib"],
        "settings": start["settings"], "train_dtype": start["train_dtype"],
        "generation_dtype": start["generation_dtype"], "adamw_8bit": start["adamw_8bit"],
        "estimate_gib": round(start["estimate_gib"], 3),
        "peak_allocated_gib": round(peak_allocated, 3),
        "peak_reserved_gib": round(peak_reserved, 3),
        "context_gib": round(start["context_gib"], 3),
        "peak_on_gpu_gib": round(peak_reserved + start["context_gib"], 3),
        "generate_peak_reserved_gib": round(max(r["generate_peak_reserved_gib"] for r in rounds), 3),
        "train_peak_reserved_gib": round(max(r["train_peak_reserved_gib"] for r in rounds), 3),
        "generate_s_median": round(median([r["generate_s"] for r in steady]), 2),
        "train_s_median": round(median([r["train_s"] for r in steady]), 2),
        "generated_tokens_per_round": rounds[0]["generated_tokens"],
        "trained_tokens_per_round": rounds[0]["trained_tokens"],
        "rounds": len(rounds),
        "per_round": [{key: round(r[key], 3) for key in ("generate_s", "train_s", "generate_peak_reserved_gib",
                                                          "train_peak_reserved_gib")} for r in rounds],
        "sampler_tokens_per_s": {name: {"median": round(median(v), 1), "min": round(min(v), 1),
                                        "max": round(max(v), 1), "runs": len(v)} for name, v in samplers.items()},
        "torch": start["torch"],
    }
    if start["device"] == "cuda":
        # The estimate counts a runtime overhead, which on a GPU is the CUDA context: compare it with the GPU's peak.
        summary["estimate_covers_peak"] = start["estimate_gib"] >= summary["peak_on_gpu_gib"]
        if start["tier_gib"] != DEMO:
            summary["fits_tier"] = summary["peak_on_gpu_gib"] <= start["tier_gib"]
    return summary


def run_case(case: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", case, "--rounds", str(args.rounds),
               "--repetitions", str(args.repetitions), "--cache-dir", args.cache_dir, "--device", args.device]
    return summarize(child_rows(command, case))


def _tokenizer(folder: str | None):
    from transformers import AutoTokenizer

    from node.learning import models

    if folder is None:
        import torch

        return models.load(models.resolve(models.BUNDLED), cache_dir=shape_twin.CACHE, dtype=torch.float32,
                           device="cpu")[1]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    models._prepare_for_generation(tokenizer)
    return tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repetitions", type=int, default=3, help="turns of each sampler after the rounds")
    parser.add_argument("--tokenizer", help="folder of the bundled model's tokenizer (default: the bundled model)")
    parser.add_argument("--cache-dir", default=str(shape_twin.CACHE))
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cpu: a plumbing check where there is no GPU (memory figures are then 0)")
    parser.add_argument("--out", type=Path, help="results file (JSON); default: print only")
    args = parser.parse_args()
    if args.child:
        child(args.child, args)
        return
    tokenizer = _tokenizer(args.tokenizer)
    results = []
    for case in args.cases:
        shape_twin.build(CASES[case][0], Path(args.cache_dir), tokenizer=tokenizer)
        try:
            results.append(run_case(case, args))
        except RuntimeError as exc:  # one case out of memory or broken: the others still say something
            results.append({"case": case, "error": str(exc)})
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"command": " ".join(sys.argv), "cases": results}, indent=1) + "\n",
                                encoding="utf-8")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
