"""The persistent queue of chain submissions (registration, reward and winners per round).

One SQLite row per (coordinator, peer id, kind, round), inserted with INSERT OR IGNORE: a round's reward can be
queued any number of times (after a restart, by a second training round in the same chain round) and still
exists once. Rows survive restarts (synchronous=FULL, committed before the node goes on) and keep what happened to
them, which is also the node's local record of its transactions (shown by the app with explorer links).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Kind = Literal["register", "reward", "winners"]
Status = Literal["pending", "delivered", "already_on_chain", "failed"]
NO_ROUND = -1  # the registration belongs to no round

_SCHEMA = """
CREATE TABLE IF NOT EXISTS submissions (
    coordinator TEXT NOT NULL,
    peer_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    round INTEGER NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    tx_hash TEXT,
    message TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (coordinator, peer_id, kind, round)
)
"""
_ORDER = "CASE kind WHEN 'register' THEN 0 ELSE 1 END, round, created"  # register first: the rest needs it


@dataclass(frozen=True)
class Submission:
    coordinator: str
    peer_id: str
    kind: Kind
    round: int
    payload: dict[str, Any]
    status: Status
    attempts: int
    tx_hash: str | None
    message: str
    created: float
    updated: float


class SubmissionQueue:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(self, coordinator: str, peer_id: str, kind: Kind, round_: int, payload: dict[str, Any]) -> bool:
        """Queue a submission; False when this (kind, round) was queued before (it is never queued twice)."""
        now = time.time()
        with self._lock:
            cursor = self._db.execute(
                "INSERT OR IGNORE INTO submissions (coordinator, peer_id, kind, round, payload, created, updated) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (coordinator, peer_id, kind, round_, json.dumps(payload), now, now),
            )
            return cursor.rowcount == 1

    def next_pending(self, coordinator: str, peer_id: str) -> Submission | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT * FROM submissions WHERE coordinator = ? AND peer_id = ? AND status = 'pending' "
                f"ORDER BY {_ORDER} LIMIT 1",
                (coordinator, peer_id),
            ).fetchone()
        return _row(row) if row else None

    def begin(self, item: Submission) -> Submission:
        """Count an attempt before anything is sent: after a crash mid-send, attempts > 0 says "check the chain
        before sending again"."""
        self._update(item, "pending", message="sending", attempts=item.attempts + 1)
        return Submission(**{**item.__dict__, "attempts": item.attempts + 1})

    def retry_later(self, item: Submission, message: str) -> None:
        self._update(item, "pending", message=message, attempts=item.attempts)

    def finish(self, item: Submission, status: Status, *, tx_hash: str | None = None, message: str = "") -> None:
        self._update(item, status, message=message, attempts=item.attempts, tx_hash=tx_hash)

    def pending_count(self, coordinator: str, peer_id: str) -> int:
        with self._lock:
            (count,) = self._db.execute(
                "SELECT COUNT(*) FROM submissions WHERE coordinator = ? AND peer_id = ? AND status = 'pending'",
                (coordinator, peer_id),
            ).fetchone()
        return int(count)

    def recent(self, coordinator: str | None = None, limit: int = 50) -> list[Submission]:
        """Newest first; every coordinator when ``coordinator`` is None."""
        where, args = ("WHERE coordinator = ?", (coordinator,)) if coordinator else ("", ())
        with self._lock:
            rows = self._db.execute(
                f"SELECT * FROM submissions {where} ORDER BY updated DESC LIMIT ?", (*args, limit)
            ).fetchall()
        return [_row(r) for r in rows]

    def _update(self, item: Submission, status: Status, *, message: str, attempts: int, tx_hash: str | None = None) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE submissions SET status = ?, message = ?, attempts = ?, tx_hash = COALESCE(?, tx_hash), "
                "updated = ? WHERE coordinator = ? AND peer_id = ? AND kind = ? AND round = ?",
                (status, message[:500], attempts, tx_hash, time.time(), item.coordinator, item.peer_id, item.kind,
                 item.round),
            )


def _row(row: tuple) -> Submission:
    coordinator, peer_id, kind, round_, payload, status, attempts, tx_hash, message, created, updated = row
    return Submission(
        coordinator=coordinator, peer_id=peer_id, kind=kind, round=round_, payload=json.loads(payload), status=status,
        attempts=attempts, tx_hash=tx_hash, message=message, created=created, updated=updated,
    )
