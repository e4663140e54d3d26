"""The persistent queue of chain submissions (registration, reward and winners per round).

One SQLite row per (coordinator, peer id, kind, round, stage), inserted with INSERT OR IGNORE: a stage's reward
can be queued any number of times (after a restart, by a second training round in the same chain stage) and still
exists once. A row whose outcome is not known yet (a check reverted, the contract's answer was not decisive)
waits until its ``retry_at`` without holding up the rows behind it. Rows survive restarts (synchronous=FULL, committed before the node goes on) and keep what happened to
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
# refused: the contract keeps one reward per wallet (0.4.2) and another node of this wallet got it
Status = Literal["pending", "delivered", "already_on_chain", "refused", "failed"]
NO_ROUND = -1  # the registration belongs to no round

_SCHEMA = """
CREATE TABLE IF NOT EXISTS submissions (
    coordinator TEXT NOT NULL,
    peer_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    round INTEGER NOT NULL,
    stage INTEGER NOT NULL DEFAULT 0,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    tx_hash TEXT,
    message TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL,
    retry_at REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (coordinator, peer_id, kind, round, stage)
)
"""
_COLUMNS = ("coordinator, peer_id, kind, round, stage, payload, status, attempts, tx_hash, message, created, updated, "
            "retry_at")
_ORDER = "CASE kind WHEN 'register' THEN 0 ELSE 1 END, round, stage, created"  # register first: the rest needs it


@dataclass(frozen=True)
class Submission:
    coordinator: str
    peer_id: str
    kind: Kind
    round: int
    stage: int
    payload: dict[str, Any]
    status: Status
    attempts: int
    tx_hash: str | None
    message: str
    created: float
    updated: float
    retry_at: float = 0.0


class SubmissionQueue:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._migrate()

    def _migrate(self) -> None:
        """Queues written before stages were keyed get a stage column (0) and a retry time; rows are kept."""
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(submissions)")]
        if columns and "stage" not in columns:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("ALTER TABLE submissions RENAME TO submissions_v1")
            self._db.execute(_SCHEMA)
            self._db.execute(
                "INSERT INTO submissions (coordinator, peer_id, kind, round, stage, payload, status, attempts, "
                "tx_hash, message, created, updated) SELECT coordinator, peer_id, kind, round, 0, payload, status, "
                "attempts, tx_hash, message, created, updated FROM submissions_v1"
            )
            self._db.execute("DROP TABLE submissions_v1")
            self._db.execute("COMMIT")
        else:
            self._db.execute(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(
        self, coordinator: str, peer_id: str, kind: Kind, round_: int, payload: dict[str, Any], stage: int = 0,
    ) -> bool:
        """Queue a submission; False when this (kind, round, stage) was queued before (it is never queued twice)."""
        now = time.time()
        with self._lock:
            cursor = self._db.execute(
                "INSERT OR IGNORE INTO submissions (coordinator, peer_id, kind, round, stage, payload, created, "
                "updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (coordinator, peer_id, kind, round_, stage, json.dumps(payload), now, now),
            )
            return cursor.rowcount == 1

    def next_pending(
        self, coordinator: str, peer_id: str, now: float | None = None, *, window: tuple[int, int] | None = None,
    ) -> Submission | None:
        """The first pending row that is due (its retry time has come). ``window``: the chain's (round, stage) on a
        coordinator with a stage window; a past round's reward of a later stage is not due before the chain is
        at that stage again (:meth:`outside_window` lists them)."""
        where, args = _outside(window, negate=True)
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLUMNS} FROM submissions WHERE coordinator = ? AND peer_id = ? AND status = 'pending' "
                f"AND retry_at <= ? {where} ORDER BY {_ORDER} LIMIT 1",
                (coordinator, peer_id, time.time() if now is None else now, *args),
            ).fetchone()
        return _row(row) if row else None

    def next_due(self, coordinator: str, peer_id: str, *, window: tuple[int, int] | None = None) -> float | None:
        """When the earliest pending row is due (a wall-clock time), or None when nothing is pending (or, with
        ``window``, nothing that the chain's stage lets through now)."""
        where, args = _outside(window, negate=True)
        with self._lock:
            (due,) = self._db.execute(
                "SELECT MIN(retry_at) FROM submissions WHERE coordinator = ? AND peer_id = ? AND status = 'pending' "
                f"{where}",
                (coordinator, peer_id, *args),
            ).fetchone()
        return due

    def outside_window(self, coordinator: str, peer_id: str, window: tuple[int, int]) -> list[Submission]:
        """The pending rewards of a past round whose stage is above the chain's: they wait for the stage window."""
        where, args = _outside(window, negate=False)
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM submissions WHERE coordinator = ? AND peer_id = ? AND status = 'pending' "
                f"{where} ORDER BY {_ORDER}",
                (coordinator, peer_id, *args),
            ).fetchall()
        return [_row(r) for r in rows]

    def begin(self, item: Submission) -> Submission:
        """Count an attempt before anything is sent: after a crash mid-send, attempts > 0 says "check the chain
        before sending again"."""
        self._update(item, "pending", message="sending", attempts=item.attempts + 1)
        return Submission(**{**item.__dict__, "attempts": item.attempts + 1})

    def retry_later(self, item: Submission, message: str, delay_s: float = 0.0) -> None:
        """Keep it pending; with ``delay_s`` it is not due again before then (other rows go on meanwhile)."""
        self._update(item, "pending", message=message, attempts=item.attempts, retry_at=time.time() + delay_s)

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
                f"SELECT {_COLUMNS} FROM submissions {where} ORDER BY updated DESC LIMIT ?", (*args, limit)
            ).fetchall()
        return [_row(r) for r in rows]

    def _update(
        self, item: Submission, status: Status, *, message: str, attempts: int, tx_hash: str | None = None,
        retry_at: float = 0.0,
    ) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE submissions SET status = ?, message = ?, attempts = ?, tx_hash = COALESCE(?, tx_hash), "
                "updated = ?, retry_at = ? WHERE coordinator = ? AND peer_id = ? AND kind = ? AND round = ? "
                "AND stage = ?",
                (status, message[:500], attempts, tx_hash, time.time(), retry_at, item.coordinator, item.peer_id,
                 item.kind, item.round, item.stage),
            )


def _outside(window: tuple[int, int] | None, *, negate: bool) -> tuple[str, tuple]:
    """The SQL condition (and its arguments) of "a past round's reward of a stage the chain is not at yet"."""
    if window is None:
        return "", ()
    condition = "(kind = 'reward' AND round < ? AND stage > ?)"
    return f"AND {'NOT ' if negate else ''}{condition}", window


def _row(row: tuple) -> Submission:
    coordinator, peer_id, kind, round_, stage, payload, status, attempts, tx_hash, message, created, updated, retry_at = row
    return Submission(
        coordinator=coordinator, peer_id=peer_id, kind=kind, round=round_, stage=stage, payload=json.loads(payload),
        status=status, attempts=attempts, tx_hash=tx_hash, message=message, created=created, updated=updated,
        retry_at=retry_at,
    )
