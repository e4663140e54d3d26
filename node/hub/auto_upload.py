"""Automatic upload every ``upload.every_rounds`` rounds trained (off by default), beside training, never in its way.

When :meth:`AutoUploader.due`, the node saves a checkpoint; after every checkpoint it calls :meth:`AutoUploader.after_checkpoint`; when an upload is due, it runs in a daemon
thread from that checkpoint's files (see :mod:`node.hub.upload`), while the next rounds train. Every outcome is an
event (:class:`UploadProgress`, :class:`UploadFinished`, :class:`UploadFailed`); no failure reaches the training loop.
An upload still running when the next one is due makes that one wait for the next checkpoint. A node that finished
its rounds waits for a running upload; one stopped by the user cancels it: the repo keeps its previous commit and
the next upload continues from what was sent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from node.config import NodeConfig
from node.errors import NodeError
from node.events import EventBus, UploadFailed, UploadFinished, UploadProgress
from node.hub.auth import load_token
from node.hub.upload import upload_run

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 0.5  # events stream to the app: a few per second is plenty for a progress bar
STOP_WAIT_S = 10.0


class AutoUploader:
    def __init__(self, config: NodeConfig, bus: EventBus, *, rounds_trained: int) -> None:
        self.config = config
        self.bus = bus
        self.every = config.upload.every_rounds
        self._uploaded_block = rounds_trained // self.every if self.every else 0
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def due(self, rounds_trained: int) -> bool:
        """Whether a multiple of ``every_rounds`` was crossed since the last upload (the node then saves a checkpoint
        and :meth:`after_checkpoint` uploads it); not while an upload still runs."""
        return bool(self.every) and not self._cancel.is_set() and not self.busy \
            and rounds_trained // self.every > self._uploaded_block

    def after_checkpoint(self, rounds_trained: int) -> None:
        """Start an upload of the checkpoint just saved if a multiple of ``every_rounds`` was crossed since the last."""
        if not self.every or self._cancel.is_set() or rounds_trained // self.every <= self._uploaded_block:
            return
        if self.busy:
            log.info("automatic upload still running; the next checkpoint will be uploaded instead")
            return
        self._uploaded_block = rounds_trained // self.every
        self._thread = threading.Thread(target=self._upload, name="hub-upload", daemon=True)
        self._thread.start()

    def close(self, should_cancel: Callable[[], bool]) -> None:
        """Let a running upload finish, unless ``should_cancel()`` (the user stopped the node): then cancel it,
        which leaves the repo untouched, and give it a moment to leave."""
        while self.busy:
            if should_cancel():
                self._cancel.set()
                self._thread.join(STOP_WAIT_S)
                break
            self._thread.join(0.5)
        self._cancel.set()

    def _upload(self) -> None:
        repo_id = self.config.upload.repo_id or ""
        last_report = 0.0

        def progress(done: int, total: int) -> None:
            nonlocal last_report
            now = time.monotonic()
            if now - last_report >= PROGRESS_INTERVAL_S or done == total:
                last_report = now
                self.bus.emit(UploadProgress(repo_id=repo_id, bytes_done=done, bytes_total=total))

        try:
            token = load_token(self.config.run.data_dir)
            if token is None:
                raise NodeError("Automatic upload is on, but no Hugging Face token is stored.",
                                hint="run `rl-swarm-node hf login` (or log in from the app)", code="hub_no_token")
            result = upload_run(self.config, token=token, progress=progress, cancel=self._cancel)
        except NodeError as exc:
            log.warning("automatic upload failed: %s", exc)
            # Whatever went wrong (the token check included), an automatic upload never stops training.
            hint = exc.hint if "training goes on" in exc.hint else f"{exc.hint}; training goes on meanwhile"
            self.bus.emit(UploadFailed(repo_id=repo_id, message=exc.message, hint=hint, code=exc.code))
            return
        except Exception as exc:  # noqa: BLE001 - an upload bug must never take the node down
            log.exception("automatic upload crashed")
            self.bus.emit(UploadFailed(repo_id=repo_id, message=f"upload crashed: {exc!r}", hint="see the node log"))
            return
        self.bus.emit(UploadFinished(repo_id=result.repo_id, url=result.url, commit=result.commit,
                                     round=result.round, files_uploaded=len(result.uploaded),
                                     bytes_sent=result.bytes_sent))
