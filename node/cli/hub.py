"""``rl-swarm-node upload`` and ``rl-swarm-node hf login|logout|whoami``: publish a run to the Hugging Face Hub.

The token is read from stdin (``--token-stdin``) or a hidden prompt, checked with the Hub, and kept in the OS keyring
(or the passphrase-encrypted file store where there is none); it is never printed or logged.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import threading
from pathlib import Path
from typing import Any

from node.cli.event_output import add_event_options, event_stream
from node.config import NodeConfig, default_data_dir, given
from node.errors import NodeError
from node.units import format_bytes


def add_commands(commands) -> None:
    upload = commands.add_parser("upload", help="publish this run's latest checkpoint to the Hugging Face Hub")
    upload.add_argument("--config", type=Path, help="TOML config file (default: the run's own config.toml)")
    upload.add_argument("--data-dir", type=Path, help=f"default {default_data_dir()}")
    upload.add_argument("--run-name", help="run folder name under <data-dir>/runs (default: default)")
    upload.add_argument("--repo", help="<user or org>/<name> (default: <user>/<model>-swarm-<peer name>)")
    visibility = upload.add_mutually_exclusive_group()
    visibility.add_argument("--private", dest="private", action="store_true", default=None,
                            help="create the repo private (the default)")
    visibility.add_argument("--public", dest="private", action="store_false", help="create the repo public")
    upload.add_argument("--token-stdin", action="store_true", help="read a token from stdin for this upload only")
    upload.add_argument("--endpoint", help="Hub URL (default: HF_ENDPOINT or https://huggingface.co)")
    # The app's way: JSON-lines upload events, and a 'cancel' (or 'stop') line on stdin cancels.
    add_event_options(upload)
    upload.set_defaults(handler=_cmd_upload)

    hf = commands.add_parser("hf", help="the Hugging Face token used for uploads")
    hf_commands = hf.add_subparsers(dest="hf_command", required=True)
    login = hf_commands.add_parser("login", help="check a write token with the Hub and store it securely")
    login.add_argument("--token-stdin", action="store_true", help="read the token from stdin instead of a prompt")
    for name, handler, text in (("logout", _cmd_logout, "forget the stored token"),
                                ("whoami", _cmd_whoami, "show whose token is stored and whether it can write")):
        hf_commands.add_parser(name, help=text).set_defaults(handler=handler)
    login.set_defaults(handler=_cmd_login)
    for sub in hf_commands.choices.values():
        sub.add_argument("--data-dir", type=Path, help=f"default {default_data_dir()}")
        if sub is not hf_commands.choices["logout"]:
            sub.add_argument("--endpoint", help="Hub URL (default: HF_ENDPOINT or https://huggingface.co)")


# ------------------------------------------------------------------------------------------------------ token
def _cmd_login(args: argparse.Namespace) -> int:
    from node.hub.auth import login

    from node.hub.auth import TOKEN_SECRET

    token = _read_token(args.token_stdin, "Hugging Face token (input hidden): ")
    store = unlocked_store(args.data_dir, confirm_new=TOKEN_SECRET)
    account = login(_data_dir(args.data_dir), token, endpoint=args.endpoint, passphrase=store.passphrase)
    print(f"logged in as {account.name} (token {account.token_name!r}, {account.role}); "
          f"token stored in the {store.describe()}")
    return 0


def _cmd_logout(args: argparse.Namespace) -> int:
    from node.hub.auth import logout, token_store

    logout(_data_dir(args.data_dir))
    print(f"token removed from the {token_store(_data_dir(args.data_dir)).describe()}")
    return 0


def _cmd_whoami(args: argparse.Namespace) -> int:
    from node.hub.auth import validate_token

    account = validate_token(_stored_token(args.data_dir), args.endpoint)
    print(f"{account.name} ({account.fullname}); token {account.token_name!r}, role {account.role}; "
          f"can write to: {', '.join(account.write_namespaces + account.write_repos) or 'nothing'}")
    return 0


def _read_token(from_stdin: bool, prompt: str) -> str:
    token = sys.stdin.readline() if from_stdin else getpass.getpass(prompt)
    return token.strip()


def _data_dir(data_dir: Path | None) -> Path:
    return Path(data_dir or default_data_dir())


def unlocked_store(data_dir: Path | None, *, confirm_new: str | None = None):
    """The secret store, with the passphrase asked for when it is the encrypted file store and none was given; asked
    twice when the secret ``confirm_new`` is not stored yet (a typo would seal it with a passphrase nobody knows)."""
    from node.hub.auth import PASSPHRASE_ENV, token_store

    store = token_store(_data_dir(data_dir))
    if store.backend == "file" and not store.passphrase:
        try:
            store.passphrase = getpass.getpass("Passphrase of the encrypted secret store: ")
            if confirm_new and not store.has(confirm_new) and \
                    getpass.getpass("Repeat the passphrase: ") != store.passphrase:
                raise NodeError("The passphrases differ.", hint="run the command again", code="passphrase_mismatch")
        except EOFError:
            raise NodeError("There is no OS keyring here, and the encrypted secret store needs a passphrase.",
                            hint=f"run this in a terminal, or set {PASSPHRASE_ENV} in the environment",
                            code="locked") from None
    return store


def _stored_token(data_dir: Path | None) -> str:
    from node.hub.auth import TOKEN_SECRET

    token = unlocked_store(data_dir).get(TOKEN_SECRET)
    if not token:
        raise NodeError("No Hugging Face token is stored.", hint="run `rl-swarm-node hf login` first",
                        code="hub_no_token")
    return token


# ----------------------------------------------------------------------------------------------------- upload
def _cmd_upload(args: argparse.Namespace) -> int:
    config = _run_config(args)
    if args.events_jsonl or args.events_fd is not None:
        return _upload_events(config, args)
    token = _read_token(True, "") if args.token_stdin else _stored_token(config.run.data_dir)
    cancel = threading.Event()
    outcome: dict[str, Any] = {}
    with _ByteProgress() as bar:
        worker = _start_upload(config, token, bar.update, cancel, outcome)
        try:
            while worker.is_alive():
                worker.join(0.2)
        except KeyboardInterrupt:
            print("cancelling the upload (the repo stays as it was)...", file=sys.stderr, flush=True)
            cancel.set()
            worker.join()
    if "error" in outcome:
        raise outcome["error"]
    result = outcome["result"]
    if result.up_to_date:
        print(f"{result.repo_id} already holds the checkpoint of round {result.round}; nothing to upload")
    else:
        print(f"uploaded the checkpoint of round {result.round} ({result.rounds_trained} rounds trained) to "
              f"{result.url}: {len(result.uploaded)} files changed, {format_bytes(result.bytes_sent)} sent in "
              f"{result.seconds:.1f} s, commit {result.commit[:12]}"
              + (f"; created the {'private' if result.private else 'public'} repo" if result.created_repo else ""))
    return 0


def _start_upload(config: NodeConfig, token: str, progress, cancel: threading.Event,
                  outcome: dict[str, Any]) -> threading.Thread:
    from node.hub.upload import upload_run

    def work() -> None:
        try:
            outcome["result"] = upload_run(config, token=token, progress=progress, cancel=cancel)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="hub-upload", daemon=True)
    worker.start()
    return worker


def _upload_events(config: NodeConfig, args: argparse.Namespace) -> int:
    """The app's way to upload: the app stays free of torch, and reads progress like any other node event."""
    from node.events import JsonLinesWriter, UploadFailed, UploadFinished, UploadProgress

    emit = JsonLinesWriter(event_stream(args))
    repo = config.upload.repo_id or ""
    cancel = threading.Event()

    def read_commands() -> None:
        for line in sys.stdin:
            if line.strip() in ("cancel", "stop"):
                cancel.set()
        cancel.set()  # the app went away

    try:
        token = _read_token(True, "") if args.token_stdin else _stored_token(config.run.data_dir)
    except NodeError as exc:
        emit(UploadFailed(repo_id=repo, message=exc.message, hint=exc.hint, code=exc.code))
        return 2
    threading.Thread(target=read_commands, name="upload-commands", daemon=True).start()
    outcome: dict[str, Any] = {}
    _start_upload(config, token, lambda done, total: emit(UploadProgress(repo_id=repo, bytes_done=done,
                                                                         bytes_total=total)),
                  cancel, outcome).join()
    error = outcome.get("error")
    if error is not None:
        if not isinstance(error, NodeError):
            raise error
        emit(UploadFailed(repo_id=repo, message=error.message, hint=error.hint, code=error.code))
        return 2
    result = outcome["result"]
    emit(UploadFinished(repo_id=result.repo_id, url=result.url, commit=result.commit, round=result.round,
                        files_uploaded=len(result.uploaded), bytes_sent=result.bytes_sent))
    return 0


def _run_config(args: argparse.Namespace) -> NodeConfig:
    """The run's own saved config (it knows the model and settings trained with), with the upload flags on top."""
    changes: dict[str, dict[str, Any]] = {
        "run": given({"data_dir": args.data_dir, "run_name": args.run_name}),
        "upload": given({"repo_id": args.repo, "private": args.private, "endpoint": args.endpoint}),
    }
    if args.config:
        config = NodeConfig.load(args.config, changes)
    else:
        config = NodeConfig.build().update(changes, source="command line")
        saved = config.run_dir / "config.toml"
        if saved.is_file():
            config = NodeConfig.load(saved, changes)
    return config


class _ByteProgress:
    """A rich progress bar in bytes (silent when stdout is not a terminal)."""

    def __enter__(self) -> _ByteProgress:
        from huggingface_hub.utils import disable_progress_bars
        from rich.progress import (
            BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn,
        )

        disable_progress_bars()  # huggingface_hub's own tqdm bars would interleave with ours
        self._progress = Progress(TextColumn("uploading"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                  TimeRemainingColumn(), transient=True)
        self._task = self._progress.add_task("upload", total=None)
        self._progress.start()
        return self

    def update(self, done: int, total: int) -> None:
        self._progress.update(self._task, completed=done, total=total)

    def __exit__(self, *exc_info) -> None:
        self._progress.stop()
