"""A node's start-up imports, with Python's cyclic collector on (as plain Python runs them) and off then frozen (as
``rl-swarm-node run`` runs them: node.import_gc): CPU seconds of a fresh child that imports node.runner, the
module whose imports (torch, transformers, TRL, datasets, reasoning-gym, hivemind) a node process starts with.

Each way runs ``--repeats`` times in its own child, the ways alternating, under ``/usr/bin/time`` (user and system
seconds). Run it with nothing else running:

    python bench/node_start.py --repeats 5

Writes bench/results/node_start.json (or ``--out``) and prints a markdown table (median and range over the repeats).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "node_start.json"
WAYS = {
    "collector on": "import node.runner",
    "collector off, then frozen": ("from node.import_gc import collector_off_while_importing\n"
                                   "with collector_off_while_importing():\n    import node.runner"),
}


def child_seconds(code: str) -> dict[str, float]:
    """User and system CPU seconds and wall seconds of a fresh interpreter running ``code``."""
    done = subprocess.run(["/usr/bin/time", "-f", "TIMES %U %S %e", sys.executable, "-c", code], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    user, system, wall = (float(x) for x in re.findall(r"^TIMES (\S+) (\S+) (\S+)$", done.stderr, re.M)[-1])
    return {"user": user, "system": system, "cpu": user + system, "wall": wall}


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 2), "range": [round(min(values), 2), round(max(values), 2)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    child_seconds("pass")  # the interpreter and the project's files into the page cache, measured by no way
    runs: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    for repeat in range(args.repeats):
        for way, code in WAYS.items():
            runs[way].append(child_seconds(code))
            print(f"repeat {repeat + 1}, {way}: {runs[way][-1]}", flush=True)
    plain, frozen = (runs[way] for way in WAYS)
    ratios = [f["cpu"] / p["cpu"] for p, f in zip(plain, frozen, strict=True)]  # paired by repeat
    result = {
        "command": "python " + " ".join(["bench/node_start.py", *sys.argv[1:]]),
        "note": "CPU seconds of a fresh interpreter importing node.runner, the ways alternating; ratios are paired by "
                "repeat (frozen / on)",
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "ways": {way: {"cpu_seconds": summary([r["cpu"] for r in rs]), "user_seconds": summary([r["user"] for r in rs]),
                       "system_seconds": summary([r["system"] for r in rs]), "runs": rs}
                 for way, rs in runs.items()},
        "cpu_ratio": summary(ratios),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print("| imports | CPU s, median (range) | user s | system s |\n| --- | --- | --- | --- |")
    for way, data in result["ways"].items():
        cells = [f"{data[k]['median']} ({data[k]['range'][0]}-{data[k]['range'][1]})"
                 for k in ("cpu_seconds", "user_seconds", "system_seconds")]
        print(f"| {way} | " + " | ".join(cells) + " |")
    print(f"ratio frozen / on, paired: {result['cpu_ratio']['median']} "
          f"({result['cpu_ratio']['range'][0]}-{result['cpu_ratio']['range'][1]})")


if __name__ == "__main__":
    main()
