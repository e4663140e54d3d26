"""Publish what this node trained to the Hugging Face Hub: token check, diff against the repo, upload, one commit.

What is uploaded is the model folder of the run's latest checkpoint (safetensors weights, config, generation config,
tokenizer), a generated model card (``README.md``) and its reward curve (``reward_curve.png``); never the optimizer
state. Reading from the checkpoint rather than the live model lets training go on in its own thread or process.

Guarantees, and how they are kept:

* **Nothing half-published.** Files are first sent as LFS objects (``preupload``), then named in a single commit
  whose parent is the head we diffed against. An attempt that dies before the commit leaves the repo at its previous
  commit; a repo changed meanwhile refuses the commit instead of mixing two uploads.
* **Resumable, never re-uploading unchanged files.** Local sha256 (and git blob ids for small files) are compared
  with the repo's tree, so unchanged files are skipped; LFS objects an interrupted attempt already sent are known to
  the Hub, whose LFS batch answer then asks for nothing, so the next attempt only sends what is missing.
  Granularity: whole LFS files; small regular files travel inside the commit and are re-sent with it.
* **Cancellable.** ``cancel`` is checked between files and before every 64 KiB read of the upload stream.
* **Plain LFS, not Xet.** Files are handed to huggingface_hub as file objects, which it uploads over the LFS batch
  protocol (the Hub accepts it for every repo). That protocol is what lets us count bytes, cancel mid-file, and test
  the whole path against a loopback server (``tests/hubserver.py``); Xet would need Hugging Face's CAS service.

The Qt-free API for the GUI: :func:`node.hub.auth.validate_token` / :func:`~node.hub.auth.login`,
:func:`default_repo_id`, :func:`upload_run`.
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from node.api import BUNDLED
from node.config import NodeConfig
from node.errors import NodeError
from node.hub.auth import require_write, validate_token
from node.hub.errors import as_node_error

if TYPE_CHECKING:
    from node.learning.checkpoint import CheckpointState

log = logging.getLogger(__name__)

CARD_FILE = "README.md"
CURVE_FILE = "reward_curve.png"
_HASH_CHUNK = 8 * 2**20
_GIT_SHA1_MAX_BYTES = 64 * 2**20  # regular (non-LFS) files on the Hub are far smaller than this
PROGRESS_INTERVAL_S = 0.1
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")

Progress = Callable[[int, int], None]  # (bytes_done, bytes_total)


class UploadCancelled(NodeError):
    def __init__(self) -> None:
        super().__init__(
            "Upload cancelled; the repo was left as it was.",
            hint="upload again to finish: files already sent are not sent twice",
            code="upload_cancelled",
        )


# ------------------------------------------------------------------------------------------------------ naming
def model_short_name(model_ref: str) -> str:
    """``Qwen/Qwen2.5-0.5B-Instruct`` -> ``Qwen2.5-0.5B-Instruct``; the bundled model is SmolLM2-135M-Instruct."""
    if model_ref == BUNDLED:
        return "SmolLM2-135M-Instruct"
    path = Path(model_ref)
    name = path.stem if path.suffix == ".gguf" else path.name
    return _NAME_CHARS.sub("-", name).strip("-.") or "model"


def default_repo_id(account_name: str, model_ref: str, peer_name: str) -> str:
    """``<user>/<model>-swarm-<peer name>``, cut to the Hub's 96-character name limit."""
    name = f"{model_short_name(model_ref)}-swarm-{_NAME_CHARS.sub('-', peer_name)}"
    return f"{account_name}/{name[:96].strip('-.')}"


def check_repo_id(repo_id: str) -> str:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
        if repo_id.count("/") != 1:
            raise HFValidationError("it must be <user or org>/<name>")
    except HFValidationError as exc:
        raise NodeError(f"{repo_id!r} is not a valid Hub repo id: {exc}", hint="use <user>/<name>",
                        code="hub_bad_repo_id") from None
    return repo_id


# ------------------------------------------------------------------------------------------------------ upload
@dataclass(frozen=True)
class UploadResult:
    repo_id: str
    url: str
    commit: str | None  # the new commit; None when nothing had changed
    round: int  # the swarm round of the uploaded checkpoint
    rounds_trained: int
    uploaded: tuple[str, ...]  # files in the new commit
    unchanged: tuple[str, ...]  # files already identical in the repo
    bytes_total: int  # size of the changed files
    bytes_sent: int  # what actually went over the network (less when an earlier attempt sent part of it)
    created_repo: bool
    private: bool | None
    seconds: float

    @property
    def up_to_date(self) -> bool:
        return self.commit is None


@dataclass
class _LocalFile:
    path_in_repo: str
    handle: io.BufferedIOBase  # opened up front: a checkpoint pruned during the upload stays readable (POSIX)
    size: int
    sha256: str = ""
    git_sha1: str | None = None
    sample: bytes = b""


def upload_run(
    config: NodeConfig,
    *,
    token: str,
    repo_id: str | None = None,
    private: bool | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    endpoint: str | None = None,
) -> UploadResult:
    """Upload the run's latest checkpoint, model card and reward curve to ``repo_id`` (created if missing).

    ``repo_id`` defaults to ``config.upload.repo_id``, else :func:`default_repo_id`; ``private`` (default
    ``config.upload.private``) only applies when the repo is created. ``progress(bytes_done, bytes_total)`` is called
    from this thread as bytes go out (at most every 0.1 s, and once at the end; nothing while files are hashed
    first, about 3 s per GB on a small CPU); set ``cancel`` from any thread to stop (raises :class:`UploadCancelled`).
    Raises NodeError with a clear message for every failure; the repo is then left at its previous commit.
    """
    from huggingface_hub import HfApi

    started = time.monotonic()
    cancel = cancel or threading.Event()
    endpoint = endpoint or config.upload.endpoint
    private = config.upload.private if private is None else private
    from node.learning.checkpoint import ADAPTER, Checkpointer  # torch: imported only when uploading, not by the app

    latest = Checkpointer(config.run_dir / "checkpoints").latest()
    if latest is None:
        raise NodeError(
            f"The run {config.run.run_name!r} has no checkpoint yet, so there is nothing to upload.",
            hint=f"train a little longer: a checkpoint is saved every {config.run.checkpoint_minutes:g} minutes of "
            "training (run.checkpoint_minutes) and when the node pauses or stops",
            code="no_checkpoint",
        )
    folder, state = latest
    adapter = folder / ADAPTER
    if config.training.lora_upload == "adapter" and adapter.is_dir():
        files = _open_model_files(adapter, weights_config="adapter_config.json")
    else:
        files = _open_model_files(folder / "model")
    try:
        account = validate_token(token, endpoint)
        repo_id = check_repo_id(repo_id or config.upload.repo_id or default_repo_id(
            account.name, state.model, _peer_name(config)))
        require_write(account, repo_id)
        card, curve = _card_files(config, state, repo_id)
        files += [_memory_file(CARD_FILE, card), _memory_file(CURVE_FILE, curve)]
        _hash_all(files, cancel)
        api = HfApi(endpoint=endpoint, token=token)
        try:
            created = _ensure_repo(api, repo_id, private)
            info = api.repo_info(repo_id, revision="main")
            remote = _remote_files(api, repo_id, info.sha)
            changed = [f for f in files if not _same(f, remote.get(f.path_in_repo))]
            unchanged = tuple(f.path_in_repo for f in files if f not in changed)
            url = f"{api.endpoint}/{repo_id}"
            if not changed:
                log.info("%s is already up to date with the checkpoint of round %d", repo_id, state.round)
                return UploadResult(repo_id, url, None, state.round, state.rounds_trained, (), unchanged, 0, 0,
                                    created, info.private, time.monotonic() - started)
            meter = _Meter(changed, progress, cancel)
            commit = _commit(api, repo_id, info.sha, changed, meter, state)
        except NodeError:
            raise
        except Exception as exc:  # noqa: BLE001
            if cancel.is_set():
                raise UploadCancelled() from None
            raise as_node_error(exc, endpoint=endpoint, action=f"upload to {repo_id}") from None
    finally:
        for f in files:
            f.handle.close()
    log.info("uploaded %d files (%d bytes sent) to %s in commit %s", len(changed), meter.sent, repo_id, commit)
    return UploadResult(
        repo_id, url, commit, state.round, state.rounds_trained, tuple(f.path_in_repo for f in changed), unchanged,
        meter.total, meter.sent, created, info.private, time.monotonic() - started,
    )


def _open_model_files(model_dir: Path, weights_config: str = "config.json") -> list[_LocalFile]:
    try:
        paths = sorted(p for p in model_dir.rglob("*") if p.is_file())
        if not any(p.suffix == ".safetensors" for p in paths) or not (model_dir / weights_config).is_file():
            raise NodeError(
                f"The checkpoint folder {model_dir} has no safetensors weights or no {weights_config}.",
                hint="let the node save a new checkpoint (stop it, or train until the next one), then upload again",
                code="bad_checkpoint",
            )
        return [
            _LocalFile(p.relative_to(model_dir).as_posix(), open(p, "rb"), p.stat().st_size)  # noqa: SIM115
            for p in paths
        ]
    except OSError as exc:
        raise NodeError(f"Could not read the checkpoint in {model_dir}: {exc}",
                        hint="check the disk and the run folder's permissions", code="disk") from None


def _memory_file(path_in_repo: str, data: bytes) -> _LocalFile:
    return _LocalFile(path_in_repo, io.BytesIO(data), len(data))


def _hash_all(files: list[_LocalFile], cancel: threading.Event) -> None:
    for f in files:
        sha256 = hashlib.sha256()
        sha1 = hashlib.sha1(b"blob %d\0" % f.size) if f.size <= _GIT_SHA1_MAX_BYTES else None
        f.handle.seek(0)
        f.sample = f.handle.read(512)
        f.handle.seek(0)
        while chunk := f.handle.read(_HASH_CHUNK):
            if cancel.is_set():
                raise UploadCancelled()
            sha256.update(chunk)
            if sha1 is not None:
                sha1.update(chunk)
        f.handle.seek(0)
        f.sha256 = sha256.hexdigest()
        f.git_sha1 = sha1.hexdigest() if sha1 is not None else None


def _same(local: _LocalFile, remote) -> bool:
    if remote is None or remote.size is None:
        return False
    if remote.lfs is not None:
        return remote.lfs.sha256 == local.sha256 and remote.lfs.size == local.size
    return remote.blob_id == local.git_sha1


def _remote_files(api, repo_id: str, revision: str) -> dict:
    from huggingface_hub.hf_api import RepoFile

    return {
        entry.path: entry
        for entry in api.list_repo_tree(repo_id, recursive=True, revision=revision)
        if isinstance(entry, RepoFile)
    }


def _ensure_repo(api, repo_id: str, private: bool) -> bool:
    """Create the repo when missing; True if it was created now."""
    from huggingface_hub.errors import HfHubHTTPError

    try:
        api.create_repo(repo_id, private=private)
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status == 409:  # exists already
            return False
        if status == 403:  # e.g. a fine-grained token scoped to this one repo may write it but not create repos
            try:
                api.repo_info(repo_id)
            except HfHubHTTPError:
                raise exc from None
            return False
        raise
    log.info("created the %s repo %s", "private" if private else "public", repo_id)
    return True


class _Meter:
    """Bytes done across the changed files, from the read positions of their upload streams."""

    def __init__(self, files: list[_LocalFile], progress: Progress | None, cancel: threading.Event) -> None:
        self.total = sum(f.size for f in files)
        self.done: dict[str, int] = {f.path_in_repo: 0 for f in files}
        self.sent = 0
        self._sent_per_file: dict[str, int] = {}
        self._progress = progress
        self._last_report = 0.0
        self.cancel = cancel

    def update(self, path: str, position: int) -> None:
        self.done[path] = position
        high = max(self._sent_per_file.get(path, 0), position)
        self.sent += high - self._sent_per_file.get(path, 0)
        self._sent_per_file[path] = high
        self.report()

    def finish(self, f: _LocalFile) -> None:
        self.done[f.path_in_repo] = f.size
        self.report()

    def report(self) -> None:
        # Reads come every 64 KiB: throttled, a 2 GB upload calls back a few hundred times, not 30 000.
        if self._progress is None:
            return
        done, now = sum(self.done.values()), time.monotonic()
        if done == self.total or now - self._last_report >= PROGRESS_INTERVAL_S:
            self._last_report = now
            self._progress(done, self.total)


class _MeteredReader(io.BufferedIOBase):
    """The file object huggingface_hub uploads from: counts what is read and stops on cancel."""

    def __init__(self, f: _LocalFile, meter: _Meter) -> None:
        super().__init__()
        self._f = f
        self._meter = meter

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if self._meter.cancel.is_set():
            raise UploadCancelled()
        data = self._f.handle.read(size)
        self._meter.update(self._f.path_in_repo, self._f.handle.tell())
        return data

    def read1(self, size: int = -1) -> bytes:
        return self.read(size)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._f.handle.seek(offset, whence)

    def tell(self) -> int:
        return self._f.handle.tell()

    def close(self) -> None:  # the handle belongs to upload_run, which closes it
        pass


def _commit(api, repo_id: str, parent: str, files: list[_LocalFile], meter: _Meter, state: CheckpointState) -> str:
    from huggingface_hub import CommitOperationAdd
    from huggingface_hub.lfs import UploadInfo

    operations = []
    for f in files:
        # Built from a placeholder, then given our stream and our hash: huggingface_hub would otherwise read the
        # whole file once more just to hash it.
        op = CommitOperationAdd(path_in_repo=f.path_in_repo, path_or_fileobj=b"")
        op.path_or_fileobj = _MeteredReader(f, meter)
        op.upload_info = UploadInfo(size=f.size, sample=f.sample, sha256=bytes.fromhex(f.sha256))
        operations.append((f, op))
    with _quiet_xet_fallback():
        for f, op in sorted(operations, key=lambda item: item[0].size):
            if meter.cancel.is_set():
                raise UploadCancelled()
            api.preupload_lfs_files(repo_id, additions=[op], num_threads=1, free_memory=False)
            if op._upload_mode == "lfs":
                meter.finish(f)
        if meter.cancel.is_set():
            raise UploadCancelled()
        info = api.create_commit(
            repo_id, [op for _, op in operations], parent_commit=parent,
            commit_message=f"RL Swarm: checkpoint of round {state.round} ({state.rounds_trained} rounds trained)",
        )
    for f in files:
        meter.finish(f)
    return info.oid


class _quiet_xet_fallback:
    """Silence huggingface_hub's warning that file objects go over LFS instead of Xet: that is our choice."""

    _logger = logging.getLogger("huggingface_hub._commit_api")

    def filter(self, record: logging.LogRecord) -> bool:
        return "not supported by Xet Storage" not in record.getMessage()

    def __enter__(self):
        self._logger.addFilter(self)
        return self

    def __exit__(self, *exc_info) -> None:
        self._logger.removeFilter(self)


# ------------------------------------------------------------------------------------------------------ helpers
def _peer_name(config: NodeConfig) -> str:
    path = config.identity_path
    if not path.is_file():
        raise NodeError(f"No peer identity at {path}: this run never started.", hint="run the node first",
                        code="no_identity")
    from node.swarm.identity import load_or_create  # imports hivemind: only when needed

    return load_or_create(path).name


def _card_files(config: NodeConfig, state: CheckpointState, repo_id: str) -> tuple[bytes, bytes]:
    from node.hub.model_card import build_model_card, reward_curve_png
    from node.runstore import RunStore

    metrics = [m for m in RunStore(config.run_dir).metrics() if m.round <= state.round]
    card = build_model_card(config, state, metrics, repo_id=repo_id, peer_name=_peer_name(config),
                            curve_file=CURVE_FILE)
    return card.encode("utf-8"), reward_curve_png(metrics)
