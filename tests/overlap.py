"""Catch calls that overlap across threads (a fixture, not production code)."""

from __future__ import annotations

import threading
import time


def count_overlap(monkeypatch, owner, name: str, *, window_s: float = 0.3) -> list[int]:
    """Wrap ``owner.name`` so that each call holds a window open; returns the list that receives, per call, how many
    calls were inside at once (its max is 1 when the calls take turns)."""
    real, inside, most, lock = getattr(owner, name), [], [], threading.Lock()

    def wrapped(*args, **kwargs):
        with lock:
            inside.append(1)
            most.append(len(inside))
        time.sleep(window_s)  # wide enough for another thread to enter, were the calls not serialised
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                inside.pop()

    monkeypatch.setattr(owner, name, wrapped)
    return most


def run_at_once(work, names, *, timeout_s: float = 300) -> list:
    """Call ``work(name)`` for every name in its own thread, all released together; the results that came back."""
    results, start = [], threading.Barrier(len(names), timeout=60)

    def run(name):
        start.wait()
        results.append(work(name))

    threads = [threading.Thread(target=run, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    return results
