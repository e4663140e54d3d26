"""The ``--events-jsonl`` / ``--events-fd`` options of the commands that report typed events, and where they go."""

from __future__ import annotations

import argparse
import os
import sys

from node.errors import NodeError


def add_event_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events-jsonl", action="store_true",
                        help="print typed events as JSON lines on stdout (where --events-fd is not possible)")
    parser.add_argument("--events-fd", type=int, metavar="FD",
                        help="write typed events as JSON lines to this inherited file descriptor (the app's channel)")


def event_stream(args: argparse.Namespace):
    """Where JSON-lines events go: the inherited fd the supervising process reads, else stdout, else nowhere."""
    if args.events_fd is not None:
        try:
            os.set_inheritable(args.events_fd, False)  # ours alone: the p2p daemon must not hold the pipe open
            return os.fdopen(args.events_fd, "w", encoding="utf-8", buffering=1)
        except OSError as exc:
            raise NodeError(f"--events-fd {args.events_fd} is not an open file descriptor ({exc})",
                            hint="pass a descriptor the parent process left open, or use --events-jsonl") from None
    return sys.stdout if args.events_jsonl else None
