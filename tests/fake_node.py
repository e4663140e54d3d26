"""A stand-in node child for process-client tests: it speaks the node's channels (``--events-fd N`` or
``--events-jsonl``, ``--control-stdin``) but its event stream is deliberately dirty.

Usage: ``python tests/fake_node.py MODE [--events-fd N | --events-jsonl] [--control-stdin]``, MODE one of
``dirty-then-wait`` (bad lines, then wait for a command), ``dirty-then-exit-3``, ``sigkill-self``,
``ignore-stop`` (never exits by itself: the client must kill it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

BAD_LINES = [
    "this is not json {",  # malformed
    json.dumps({"kind": "from_the_future", "x": 1}),  # unknown kind
    json.dumps({"kind": "state_changed", "detail": "no state field"}),  # known kind, required field missing
    json.dumps([1, 2, 3]),  # JSON but not an event object
]


def main() -> int:
    mode, options = sys.argv[1], sys.argv[2:]
    if "--events-fd" in options:
        stream = os.fdopen(int(options[options.index("--events-fd") + 1]), "w", buffering=1)
    else:
        stream = sys.stdout
    print("garbage a library printed on stdout {\"kind\": ", flush=True)
    print("a warning on stderr", file=sys.stderr, flush=True)

    def emit(line: str) -> None:
        stream.write(line + "\n")
        stream.flush()

    for line in BAD_LINES:
        emit(line)
    emit(json.dumps({"kind": "state_changed", "state": "training", "detail": "", "time": 1.0, "added_later": 5}))
    if mode == "dirty-then-exit-3":
        emit(json.dumps({"kind": "error", "message": "the model does not fit", "hint": "pick a smaller one"}))
        return 3
    if mode == "sigkill-self":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "ignore-stop":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for _ in sys.stdin:
            pass
        while True:
            time.sleep(1)
    for line in sys.stdin:  # dirty-then-wait
        command = line.strip()
        emit(json.dumps({"kind": "state_changed", "state": "paused" if command == "pause" else "training",
                         "detail": f"got {command}"}))
        if command == "stop":
            emit(json.dumps({"kind": "state_changed", "state": "stopped"}))
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
