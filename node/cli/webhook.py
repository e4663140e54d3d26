"""``rl-swarm-node webhook set|clear|show|test``: the webhook told when the node stops, keeps crashing, sees no peers
or finished an upload (:mod:`node.notify`).

Its URL often is a credential (a Discord or Slack webhook, an ntfy topic), so it is kept where the Hugging Face token
is: in the OS keyring, or the passphrase-encrypted file store where there is none. It is read from stdin
(``--url-stdin``) or a hidden prompt, and never printed whole: only its scheme and host.
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

from node.cli.hub import _data_dir, _read_token, unlocked_store
from node.config import default_data_dir
from node.errors import NodeError


def add_commands(commands) -> None:
    webhook = commands.add_parser("webhook", help="the webhook told when the node stops, keeps crashing, sees no "
                                  "peers or finished an upload (ntfy, Discord, Slack, any JSON POST)")
    webhook_commands = webhook.add_subparsers(dest="webhook_command", required=True)
    set_ = webhook_commands.add_parser("set", help="store the webhook URL securely; a node uses it when it starts")
    set_.add_argument("--url-stdin", action="store_true", help="read the URL from stdin instead of a hidden prompt")
    set_.set_defaults(handler=_cmd_set)
    for name, handler, text in (("clear", _cmd_clear, "forget the webhook: no more notifications off the machine"),
                                ("show", _cmd_show, "show the webhook's host and where its URL is stored"),
                                ("test", _cmd_test, "send a test notification to the stored webhook")):
        webhook_commands.add_parser(name, help=text).set_defaults(handler=handler)
    for sub in webhook_commands.choices.values():
        sub.add_argument("--data-dir", type=Path, help=f"default {default_data_dir()}")


def _cmd_set(args: argparse.Namespace) -> int:
    from node.notify import WEBHOOK_SECRET, check_webhook_url, describe_endpoint, remember_webhook

    url = check_webhook_url(_read_token(args.url_stdin, "Webhook URL (input hidden): "))
    store = unlocked_store(args.data_dir, confirm_new=WEBHOOK_SECRET)
    remember_webhook(_data_dir(args.data_dir), url, store.passphrase)
    print(f"webhook {describe_endpoint(url)} stored in the {store.describe()}; a running node uses it once it "
          "starts again")
    return 0


def _cmd_clear(args: argparse.Namespace) -> int:
    from node.notify import forget_webhook
    from node.secret_store import node_store

    forget_webhook(_data_dir(args.data_dir))
    print(f"webhook removed from the {node_store(_data_dir(args.data_dir)).describe()}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from node.notify import describe_endpoint

    url, store = _stored(args.data_dir)
    print(f"webhook {describe_endpoint(url)} (the whole URL is kept in the {store.describe()})")
    return 0


def _cmd_test(args: argparse.Namespace) -> int:
    from node.notify import Notification, Webhook, describe_endpoint

    url, _store = _stored(args.data_dir)
    outcome: list[bool] = []
    done = threading.Event()
    hook = Webhook(url, retries=0, on_result=lambda _n, delivered: (outcome.append(delivered), done.set()))
    hook.send(Notification(kind="test", title="RL Swarm test notification",
                           message="notifications from this computer arrive here"))
    done.wait(hook.timeout_s + 5)
    hook.close(timeout_s=0)
    if outcome == [True]:
        print(f"delivered to {describe_endpoint(url)}")
        return 0
    raise NodeError(f"The test notification was not delivered to {describe_endpoint(url)}.",
                    hint="check the URL (`rl-swarm-node webhook set` replaces it); the endpoint's answer is in the "
                    "warning above", code="webhook_failed")


def _stored(data_dir: Path | None):
    """The stored URL and its store, the passphrase asked for only when there is one to read."""
    from node.notify import WEBHOOK_SECRET, webhook_stored

    url = None
    if webhook_stored(_data_dir(data_dir)):
        store = unlocked_store(data_dir)
        url = store.get(WEBHOOK_SECRET)
    if not url:
        raise NodeError("No webhook is set.", hint="run `rl-swarm-node webhook set` (or set it in the app's Settings)",
                        code="no_webhook")
    return url, store
