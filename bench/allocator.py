"""Allocator settings side by side: resident memory kept round after round AND the share of CPU time spent in the
kernel, for the node's own round (bench/memory.py's child: the demo's round, generation plus one GRPO step).

Each candidate runs the same rounds in its own child process under ``/usr/bin/time -v`` (user and system seconds,
page faults), alternating candidates, ``--repeats`` times. The child reports the RSS kept after every round; the
growth from the first measured round to the last tells whether the heap stays flat.

    python bench/allocator.py --rounds 6 --repeats 2              # the bundled model, 1 thread
    python bench/allocator.py --candidates mmap-128k trim --rounds 20 --out bench/results/allocator_glibc.json

Writes bench/results/allocator.json (or ``--out``) and prints a markdown table (median and range over the repeats).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results" / "allocator.json"
MIB = 2**20
GLIBC_VARS = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "LD_PRELOAD",
              "MALLOC_CONF")
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def candidates() -> dict[str, tuple[dict[str, str], bool]]:
    """Each candidate's malloc variables, and whether the child trims the heap after every round as the node does
    (node.allocator.trim_heap: glibc's malloc_trim, a no-op under jemalloc)."""
    from node.allocator import JEMALLOC_CONF

    def tuned(threshold_mib: int) -> dict[str, str]:
        return {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": str(threshold_mib * MIB),
                "MALLOC_TRIM_THRESHOLD_": str(256 * MIB), "MALLOC_TOP_PAD_": str(64 * MIB)}

    mmap_128k = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": str(128 * 1024),
                 "MALLOC_TRIM_THRESHOLD_": str(128 * MIB)}
    return {
        "glibc-default": ({}, False),
        "mmap-128k": (mmap_128k, False),  # every block >= 128 KiB its own mmap: glibc's settings until the trim
        "tuned-4m": (tuned(4), False),
        "tuned-32m": (tuned(32), False),
        # glibc's dynamic mmap threshold (setting the trim threshold or top pad would fix it), 2 arenas, and the
        # free pages inside the heap handed back after every round
        "trim": ({"MALLOC_ARENA_MAX": "2"}, True),
        "jemalloc": ({"LD_PRELOAD": JEMALLOC, "MALLOC_CONF": JEMALLOC_CONF}, False),  # node.allocator's choice
    }


_TIME_FIELDS = {
    "user_s": r"User time \(seconds\): ([\d.]+)",
    "system_s": r"System time \(seconds\): ([\d.]+)",
    "minor_faults": r"Minor \(reclaiming a frame\) page faults: (\d+)",
    "max_rss_kb": r"Maximum resident set size \(kbytes\): (\d+)",
}


def run(name: str, env_vars: dict[str, str], trim: bool, args: argparse.Namespace) -> dict:
    from node.launch import node_environment

    env = {k: v for k, v in node_environment().items() if k not in GLIBC_VARS}
    env.update(env_vars)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = ["/usr/bin/time", "-v", sys.executable, str(ROOT / "bench" / "memory.py"), "--child", args.model, "full",
               "--rounds", str(args.rounds), "--threads", str(args.threads), "-I", "2", "-J", "2", "-G", "4",
               "--max-new-tokens", str(args.max_new_tokens), "--micro-batch-groups", "1", "--lora-rank", "16",
               "--cache-dir", args.cache_dir, "--generation-dtype", "float32", "--optimizer-states", "auto",
               "--max-minutes", "0", *([] if trim else ["--no-trim"])]
    scratch = Path(tempfile.mkdtemp(prefix="rl-swarm-allocator-"))
    env["TMPDIR"] = str(scratch)  # the child's TRL output folder lands here, and goes with it
    # The child's rows go to a file as they come, so a long run cut short still shows its rounds.
    descriptor, progress_name = tempfile.mkstemp(prefix=f"rl-swarm-allocator-{name}-", suffix=".jsonl")
    os.close(descriptor)  # unique: benches running side by side on one machine must not share it
    progress = Path(progress_name)
    try:
        with progress.open("w", encoding="utf-8") as rows_file:
            out = subprocess.run(command, env=env, stdout=rows_file, stderr=subprocess.PIPE, text=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if out.returncode:
        raise RuntimeError(f"{name} failed: {out.stderr[-2000:]}")
    rows = [json.loads(line) for line in progress.read_text(encoding="utf-8").splitlines() if line.startswith("{")]
    progress.unlink()
    rounds = [r for r in rows if r["phase"] == "round"]
    timing = {key: float(re.search(pattern, out.stderr).group(1)) for key, pattern in _TIME_FIELDS.items()}
    kept = [r["kept_gb"] for r in rounds]
    result = {
        "candidate": name, "trim_after_round": trim, **timing,
        "system_share": timing["system_s"] / (timing["user_s"] + timing["system_s"]),
        "kept_rss_gb": [round(k, 3) for k in kept],
        # from the second round on: the first grows the optimizer's moments and torch's pools once
        "kept_growth_gb": round(kept[-1] - kept[1], 3) if len(kept) > 2 else None,
        "seconds_per_round": round(statistics.median(r["generate_s"] + r["train_s"] for r in rounds), 2),
    }
    print(f"  {name}: {json.dumps(result)}", file=sys.stderr, flush=True)
    return result


def save(command: str, args: argparse.Namespace, runs: dict[str, list[dict]]) -> None:
    results = Path(args.out)
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps({"command": command.strip(), "model": args.model, "rounds": args.rounds,
                                   "threads": args.threads, "runs": runs}, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", nargs="+", default=None)
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--out", default=str(RESULTS), help="where the results go (default: %(default)s)")
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "rl-swarm-bench"))
    args = parser.parse_args()
    table = candidates()
    if not Path(JEMALLOC).is_file():
        table.pop("jemalloc")
        print("jemalloc not installed (Debian: libjemalloc2): left out", file=sys.stderr)
    names = args.candidates or list(table)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    command = "python bench/allocator.py " + " ".join(sys.argv[1:])
    for _ in range(args.repeats):
        for name in names:  # alternating, so the shared machine's drift hits every candidate alike
            runs[name].append(run(name, *table[name], args))
            save(command, args, runs)  # after every run: a bench cut short still leaves what it measured
    print(f"\n{args.model}, {args.rounds} rounds, {args.threads} thread(s), median (range) of {args.repeats} runs\n")
    print("| candidate | system share of CPU time | minor page faults (M) | kept RSS growth, round 2 to last (GB) "
          "| max RSS (GB) | s per round |")
    print("| --- | --- | --- | --- | --- | --- |")

    def cell(values, fmt):
        values = [v for v in values if v is not None]
        if not values:
            return "-"
        return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"

    for name, results in runs.items():
        print(f"| {name} | {cell([r['system_share'] * 100 for r in results], '{:.1f}')} % "
              f"| {cell([r['minor_faults'] / 1e6 for r in results], '{:.1f}')} "
              f"| {cell([r['kept_growth_gb'] for r in results], '{:+.3f}')} "
              f"| {cell([r['max_rss_kb'] / 1e6 for r in results], '{:.2f}')} "
              f"| {cell([r['seconds_per_round'] for r in results], '{:.1f}')} |")


if __name__ == "__main__":
    main()
