"""Tokens per CPU-second of the node's samplers, side by side in one process.

The workload of issue 35: the bundled model, the node's real one-shot prompts (:class:`node.tasks.source.TaskSource`,
seed 1234, 2 questions), G=4 completions each, 128 new tokens, temperature 1.0, top_p 1.0. Two ways for a
completion to end (``--workloads``):

* ``suppressed``: no token ends a completion (end-of-sequence is an ordinary token here), so every row runs to the
  limit and every sampler does the same work (the issue's workload);
* ``natural``: the model's own end-of-sequence tokens end completions, as in a real round, so rows end at
  different steps; with one seed every sampler samples the same completions (checked: ``same_completions``).

Each round runs every sampler on every workload once, in a rotating order, so a busy machine slows them alike; the
process's CPU time is the measure (one torch thread), wall seconds are kept too; ratios are taken within a round.

Samplers (all from the same float32 policy; a bfloat16 one samples from a cast copy made per call, as the node does,
the cast counted):

* ``generate/float32``: transformers ``generate()`` with its growing (``torch.cat``) cache;
* ``preallocated/float32``: :mod:`node.learning.decoding` as it is in this tree;
* ``reference/float32``: :mod:`node.learning.decoding` as it was at ``--reference`` (git; default: the loop before
  ended rows left the batch), run in its place; ``reference-onnxruntime/float32``: :mod:`node.learning.ort_decoding`
  as it was there, over that decoding module;
* ``generate/bfloat16`` and ``preallocated/bfloat16``: the same from a bfloat16 copy (fast only where the CPU has
  native bfloat16: avx512_bf16 or AMX; emulated elsewhere);
* ``onnxruntime/float32``: :mod:`node.learning.ort_decoding`, the same loop and draws with ONNX Runtime running the
  forwards over the policy's float32 weights; its per-call session build (handing it the current weights) is
  counted in the round, the graph's build once per process (``export_cpu_s``, timed before the rounds);
* ``onnxruntime-int8/float32`` and ``onnxruntime-int4/float32``: the same with the decoder layers' projections
  quantized from the float32 weights at each session build (:mod:`bench.ort_quantized`: blocks of 32,
  ``MatMulNBits``), the quantization counted in the round; embedding, norms and head stay float32. Measured, not
  in the node.
* ``llamacpp/bf16`` (and ``llamacpp/f32``, ``llamacpp/q8_0``): issue 35's anchor, the policy's weights written once
  per process into a GGUF file in that format (``gguf_write_cpu_s``, timed before the rounds) and decoded by
  llama.cpp, the 8 rows as one batch, one thread, the draw the torch loop's (:mod:`bench.llamacpp`). Only where
  ``llama_cpp`` (llama-cpp-python, built from source; not a dependency) imports; skipped with a message elsewhere.
* ``vllm/bfloat16`` and ``vllm/float32``: ``training.sampler = "vllm"`` (:mod:`node.learning.vllm_decoding`), an
  in-process vLLM engine in that dtype handed the policy's weights at every call (the push counted in the round);
  the engine's start (once per node process) is timed before the rounds (``vllm_start_s``). Only where ``vllm``
  imports (a CUDA machine with vllm installed: ``bench/gpu_vllm.sh``); skipped with a message elsewhere.

``--device cuda`` runs the policy on the GPU; rates are then tokens per wall-clock second (the GPU synchronized
before a clock is read), not per CPU-second. ``--model`` names a catalog model measured as its shape twin
(:mod:`bench.shape_twin`: its architecture with random weights and the bundled tokenizer, so its completions never
end by themselves: use the ``suppressed`` workload); ``--tokenizer`` a folder holding the bundled tokenizer, for a
machine without the bundled model.

    python bench/generation.py --rounds 5
    python bench/generation.py --rounds 3 --samplers reference/float32 preallocated/float32 \
        --workloads suppressed natural --baseline reference/float32 --out bench/results/generation_rows.json
    python bench/generation.py --rounds 5 --samplers preallocated/float32 onnxruntime/float32 \
        --workloads suppressed natural --baseline preallocated/float32 --out bench/results/generation_ort.json
    python bench/generation.py --rounds 5 --samplers reference/float32 preallocated/float32 \
        reference-onnxruntime/float32 onnxruntime/float32 --reference aa2fb8f --baseline reference/float32 \
        --out bench/results/generation_draw.json
    PYTHONPATH=$PWD:/work/llama-site python bench/generation.py --rounds 5 --samplers preallocated/float32 \
        onnxruntime/float32 llamacpp/bf16 --baseline preallocated/float32 --out bench/results/generation_llamacpp.json
    python bench/generation.py --device cuda --model Qwen/Qwen2.5-0.5B-Instruct --samplers preallocated/bfloat16 \
        vllm/bfloat16 --baseline preallocated/bfloat16 --out bench/results/generation_vllm_cuda.json

Writes bench/results/generation.json (or ``--out``: settings, the machine, every run, median and range per
workload and sampler and its ratio to ``--baseline``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "generation.json"
SAMPLERS = ("generate/float32", "preallocated/float32", "reference/float32", "generate/bfloat16",
            "preallocated/bfloat16", "onnxruntime/float32", "onnxruntime-int8/float32", "onnxruntime-int4/float32",
            "reference-onnxruntime/float32", "llamacpp/bf16", "llamacpp/f32", "llamacpp/q8_0", "vllm/bfloat16",
            "vllm/float32")
WORKLOADS = ("suppressed", "natural")
# The decode loop before a row that ended left the batch.
REFERENCE = "bb172af"


def reference_decoding(commit: str, name: str = "decoding"):
    """node/learning/``name``.py as it was at ``commit``, imported as a module of its own."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:node/learning/{name}.py"], check=True,
                            capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader(f"{name}_at_{commit}", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are built
    exec(compile(source, f"{commit}:node/learning/{name}.py", "exec"), module.__dict__)
    return module


def reference_ort_decoding(commit: str, decoding):
    """node/learning/ort_decoding.py as it was at ``commit``, over ``decoding`` (that commit's)."""
    module = reference_decoding(commit, "ort_decoding")
    module.decoding = decoding
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-I", type=int, default=2)
    parser.add_argument("-G", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--samplers", nargs="+", default=[n for n in SAMPLERS if n.split("/")[0] not in
                                                          ("reference", "onnxruntime", "llamacpp", "vllm")],
                        choices=SAMPLERS)
    parser.add_argument("--workloads", nargs="+", default=["suppressed"], choices=WORKLOADS)
    parser.add_argument("--baseline", default="generate/float32", help="the sampler the ratios are taken to")
    parser.add_argument("--reference", default=REFERENCE, help="the commit whose decode loop reference/ runs")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "rl-swarm-bench"))
    parser.add_argument("--load", default="", help="what else ran on the machine, recorded with the results")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--model", default="bundled", help="bundled, or a catalog model measured as its shape twin")
    parser.add_argument("--tokenizer", help="folder of the bundled model's tokenizer (default: the bundled model)")
    parser.add_argument("--vllm-gpu-memory", type=float, default=0.3, help="vllm/: training.vllm_gpu_memory_utilization")
    args = parser.parse_args()
    args.samplers = available_samplers(args.samplers)
    if not args.samplers:
        raise SystemExit("no sampler left to measure")

    import torch

    from node.learning import grpo, hardware, vllm_decoding
    from node.tasks.source import TaskSource, build_messages
    from node.tasks.taskref import DEFAULT_FAMILIES

    torch.set_num_threads(args.threads)
    model, tokenizer = _load(args)
    wall = args.device == "cuda"

    def synchronized() -> None:
        if wall:
            torch.cuda.synchronize()

    policies = {}
    for name in args.samplers:
        path, dtype = name.split("/")
        dtype = "float32" if path == "llamacpp" else dtype  # llama.cpp's format is its file's; the draw is float32
        policies[name] = grpo.Policy(model, tokenizer, generation_dtype=getattr(torch, dtype), max_prompt_tokens=1024,
                                     preallocated_cache=path != "generate", sampler="vllm" if path == "vllm" else "torch",
                                     vllm_gpu_memory_utilization=args.vllm_gpu_memory)
    natural_eos = policies[args.samplers[0]].eos_ids
    reference = reference_decoding(args.reference) if any(n.startswith("reference") for n in args.samplers) else None
    if "reference-onnxruntime/float32" in args.samplers:
        reference_ort = reference_ort_decoding(args.reference, reference)
        reference_ort.graph_for(reference_ort.Shape(model.config))  # the once-per-process export, before the rounds
    ort_paths = {n.split("/")[0] for n in args.samplers if n.startswith("onnxruntime")}
    ort = _ort_sampler(model, ort_paths) if ort_paths else None
    tasks = TaskSource({family: 1.0 for family in DEFAULT_FAMILIES}, seed=1234).sample(args.I, random.Random(0))
    prompts = [policies[args.samplers[0]].prompt_ids(build_messages(task.question)) for task in tasks]
    llama = _llama_samplers(model, args.samplers, rows=args.I * args.G,
                            positions=max(len(p) for p in prompts) + args.max_new_tokens, threads=args.threads)
    vllm_start = {}
    for name in args.samplers:
        if name.startswith("vllm/"):  # the engine starts once per node process: timed apart, before the rounds
            started = time.perf_counter()
            policies[name]._vllm_engine(policies[name].sampling_model())
            vllm_start[name] = round(time.perf_counter() - started, 2)
    hw = hardware.detect()
    runs, completions = [], {}
    pairs = [(workload, name) for workload in args.workloads for name in args.samplers]
    for number in range(args.rounds):
        shift = number % len(pairs)
        for workload, name in pairs[shift:] + pairs[:shift]:
            policy = policies[name]
            # natural: the model's own end-of-sequence tokens; suppressed: no token ends a completion
            policy.eos_ids = natural_eos if workload == "natural" else (model.config.vocab_size,)
            swapped = nullcontext()
            if name.startswith("reference-onnxruntime"):
                swapped = mock.patch.object(grpo.decoding, "sample", reference_ort.sample)
            elif name.startswith("reference"):
                swapped = mock.patch.object(grpo.decoding, "sample", reference.sample)
            elif name.startswith("onnxruntime"):
                swapped = mock.patch.object(grpo.decoding, "sample", ort["sample"][name.split("/")[0]])
                ort["session_cpu_s"].clear()
            elif name.startswith("llamacpp"):
                swapped = mock.patch.object(grpo.decoding, "sample", llama["samplers"][name].sample)
            gc.collect()
            with swapped:
                synchronized()
                started, cpu = time.perf_counter(), time.process_time()
                groups = policy.generate(prompts, num_generations=args.G, max_new_tokens=args.max_new_tokens,
                                         temperature=1.0, top_p=1.0, seed=number)
                synchronized()
                seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            completions[workload, name, number] = groups
            lengths = [c.length for group in groups for c in group]  # the end token counts
            row = {"round": number + 1, "workload": workload, "sampler": name, "tokens": sum(lengths),
                   "lengths": lengths, "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3),
                   "tokens_per_cpu_s": round(sum(lengths) / cpu, 2), "tokens_per_s": round(sum(lengths) / seconds, 2)}
            if name.startswith("onnxruntime"):
                row["session_build_cpu_s"] = round(sum(ort["session_cpu_s"]), 3)
            runs.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)

    summary = {workload: _summary([r for r in runs if r["workload"] == workload], args.samplers, args.baseline,
                                  wall=wall)
               for workload in args.workloads}
    for workload in args.workloads:
        for name in args.samplers:
            # with one seed, every float32 sampler should have sampled what the baseline sampled
            summary[workload][name]["same_completions_as_baseline"] = all(
                completions[workload, name, n] == completions.get((workload, args.baseline, n)) for n in range(args.rounds))
    result = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "settings": {"model": "bundled SmolLM2-135M-Instruct" if args.model == "bundled" else
                     f"{args.model} (shape twin: random weights)", "device": args.device,
                     "rate": "tokens per wall-clock second" if wall else "tokens per CPU-second", "I": args.I, "G": args.G, "threads": args.threads,
                     "max_new_tokens": args.max_new_tokens, "rounds": args.rounds, "workloads": args.workloads,
                     "baseline": args.baseline, "reference_commit": args.reference,
                     "prompt_tokens": [len(p) for p in prompts], "torch": torch.__version__,
                     **({"onnxruntime": ort["version"], "export_cpu_s": ort["export_cpu_s"]} if ort else {}),
                     **({key: value for key, value in llama.items() if key != "samplers"} if llama else {}),
                     **({"vllm": vllm_decoding.version(), "vllm_start_s": vllm_start,
                         "vllm_gpu_memory_utilization": args.vllm_gpu_memory} if vllm_start else {})},
        "machine": {"description": hw.describe(), "cpu_bf16": hardware.cpu_bf16_report(), "load": args.load},
        "summary": summary,
        "runs": runs,
    }
    rate, clock = ("tokens_per_s", "wall_s") if wall else ("tokens_per_cpu_s", "cpu_s")
    print(f"| workload | sampler | {'tokens per second' if wall else 'tokens per CPU-second'}, median (range) "
          f"| vs baseline, median (range) | {'wall' if wall else 'CPU'} s per round, median (range) | vs baseline "
          "| wall s |")
    print("|---|---|---|---|---|---|---|")
    for workload, rows in summary.items():
        for name, row in rows.items():
            low, high = row[f"{rate}_range"]
            cpu_low, cpu_high = row[f"{clock}_range"]
            print(f"| {workload} | {name} | {row[f'{rate}_median']:.1f} ({low:.1f}-{high:.1f}) "
                  f"| {_ratio(row, 'vs_baseline')} | {row[f'{clock}_median']:.1f} ({cpu_low:.1f}-{cpu_high:.1f}) "
                  f"| {_ratio(row, f'{clock}_vs_baseline')} | {row['wall_s_median']:.1f} |")
    if not args.no_save:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


def available_samplers(names: list[str]) -> list[str]:
    """``names`` without the llama.cpp samplers where ``llama_cpp`` does not import and without the vLLM ones where
    ``vllm`` does not, saying so."""
    from bench import llamacpp

    asked = [name for name in names if name.startswith("llamacpp/")]
    why = llamacpp.unavailable() if asked else None
    if why:
        print(f"skipping {', '.join(asked)}: {why}; llama-cpp-python is built from source and is not a dependency "
              "(docs/performance.md says how it was built; put it on PYTHONPATH)", file=sys.stderr)
        names = [name for name in names if name not in asked]
    asked = [name for name in names if name.startswith("vllm/")]
    why = _vllm_unavailable() if asked else None
    if why:
        print(f"skipping {', '.join(asked)}: {why}; vLLM is not a dependency (bench/gpu_vllm.sh installs it on a "
              "CUDA machine)", file=sys.stderr)
        names = [name for name in names if name not in asked]
    return names


def _vllm_unavailable() -> str | None:
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # ImportError, or a build that does not load here
        return f"vllm does not import ({type(exc).__name__}: {exc})"
    return None


def _load(args):
    """The policy in float32 on ``args.device``: the bundled model, or ``args.model``'s shape twin."""
    import torch

    from bench import shape_twin
    from node.learning import models

    if args.model == "bundled":
        return models.load(models.resolve(models.BUNDLED), cache_dir=Path(args.cache_dir), dtype=torch.float32,
                           device=args.device)
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        models._prepare_for_generation(tokenizer)
    folder = shape_twin.build(args.model, Path(args.cache_dir), tokenizer=tokenizer)
    spec = models.CATALOG[args.model]
    return models.load(models.ResolvedModel(ref=args.model, kind="local_dir", path_or_id=str(folder), gguf_file=None,
                                            params=spec.params),
                       cache_dir=Path(args.cache_dir), dtype=torch.float32, device=args.device)


def _llama_samplers(model, names: list[str], *, rows: int, positions: int, threads: int) -> dict | None:
    """A llama.cpp sampler per ``llamacpp/<format>`` in ``names``, over the bundled model's weights written as that
    format (timed: ``gguf_write_cpu_s``) into a folder removed at exit."""
    formats = [name.split("/")[1] for name in names if name.startswith("llamacpp/")]
    if not formats:
        return None
    import atexit
    import shutil
    import tempfile

    import llama_cpp

    from bench import llamacpp
    from node.learning import models

    bundled = models.resolve(models.BUNDLED)
    folder = Path(tempfile.mkdtemp(prefix="generation-llamacpp-"))
    samplers, written = {}, {}
    for weights in formats:
        path = folder / f"policy-{weights}.gguf"
        cpu = time.process_time()
        llamacpp.write_gguf(model, Path(bundled.path_or_id) / bundled.gguf_file, path, weights)
        written[weights] = round(time.process_time() - cpu, 3)
        samplers[f"llamacpp/{weights}"] = llamacpp.Sampler(path, rows=rows, positions=positions, threads=threads)
    atexit.register(shutil.rmtree, folder, True)
    return {"samplers": samplers, "llama_cpp": llama_cpp.__version__, "gguf_write_cpu_s": written,
            "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip()}


def _ort_sampler(model, paths: set[str]) -> dict:
    """ONNX Runtime's sampler, its graphs built (the once-per-architecture export, one per weight format in
    ``paths``) and timed here; each session build's CPU seconds (quantization included) are collected per round."""
    import onnxruntime

    from bench import ort_quantized
    from node.learning import ort_decoding

    if not ort_decoding.supports(model):
        raise SystemExit("onnxruntime/float32: this model's architecture has no ONNX Runtime graph here")
    cpu = time.process_time()
    ort_decoding.graph_for(ort_decoding.Shape(model.config))
    samples = {}
    for path in sorted(paths):
        if ort_quantized.SAMPLERS[path] is not None:
            ort_quantized.prepare(model, ort_quantized.SAMPLERS[path])
        samples[path] = ort_quantized.sample_for(path)
    export = time.process_time() - cpu
    builds: list[float] = []
    build = ort_decoding.Session.__init__

    def timed_build(self, *args, **kwargs):  # every sampler's sessions, the quantized ones included, build here
        started = time.process_time()
        build(self, *args, **kwargs)
        builds.append(time.process_time() - started)

    ort_decoding.Session.__init__ = timed_build
    return {"sample": samples, "export_cpu_s": round(export, 3), "session_cpu_s": builds,
            "version": onnxruntime.__version__}


def _summary(runs: list[dict], samplers: list[str], baseline: str, *, wall: bool = False) -> dict:
    """Median and range per sampler; ratios to the baseline taken within each round, where what the machine's load
    did to both cancels. By CPU seconds, or with ``wall`` (a GPU's samplers) by wall-clock seconds."""
    summary = {}
    base = {r["round"]: r for r in runs if r["sampler"] == baseline}
    rate, clock, field = ("tokens_per_s", "wall_s", "seconds") if wall else ("tokens_per_cpu_s", "cpu_s", "cpu_seconds")
    for name in samplers:
        mine = [r for r in runs if r["sampler"] == name]
        rates, times = [r[rate] for r in mine], [r[field] for r in mine]
        summary[name] = {
            f"{rate}_median": round(statistics.median(rates), 1),
            f"{rate}_range": [min(rates), max(rates)],
            f"{clock}_median": round(statistics.median(times), 2),
            f"{clock}_range": [min(times), max(times)],
            "wall_s_median": round(statistics.median(r["seconds"] for r in mine), 2),
            "tokens_median": statistics.median(r["tokens"] for r in mine),
        }
        builds = [r["session_build_cpu_s"] for r in mine if "session_build_cpu_s" in r]
        if builds:
            summary[name]["session_build_cpu_s_median"] = round(statistics.median(builds), 3)
            summary[name]["session_build_cpu_s_range"] = [min(builds), max(builds)]
        if base:
            for key, measured, invert in (("vs_baseline", rate, False), (f"{clock}_vs_baseline", field, True)):
                ratios = [(base[r["round"]][measured] / r[measured]) if invert else
                          (r[measured] / base[r["round"]][measured]) for r in mine]
                summary[name][f"{key}_median"] = round(statistics.median(ratios), 3)
                summary[name][f"{key}_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
    return summary


def _ratio(row: dict, key: str) -> str:
    if f"{key}_median" not in row:
        return "-"
    low, high = row[f"{key}_range"]
    return f"{row[f'{key}_median']:.2f}x ({low:.2f}-{high:.2f})"


if __name__ == "__main__":
    main()
