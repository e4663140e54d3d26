"""Process-wide logging: a rotating file in the run folder plus concise lines on stderr."""

from __future__ import annotations

import logging
import logging.handlers
import sys
import warnings
from pathlib import Path

LOG_FILE = "node.log"
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Libraries that narrate every step at INFO; their warnings still get through.
_CHATTY = ("hivemind", "transformers", "trl", "accelerate", "datasets", "httpx", "urllib3", "filelock")


def setup_logging(log_dir: Path, *, verbose: bool = False) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / LOG_FILE
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    file_handler = logging.handlers.RotatingFileHandler(path, maxBytes=5 * 2**20, backupCount=3, encoding="utf-8")
    file_handler.setFormatter(logging.Formatter(_FORMAT))
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    console.setLevel(logging.DEBUG if verbose else logging.WARNING)
    root.addHandler(file_handler)
    root.addHandler(console)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # hivemind prints through a handler of its own; route its records through ours (file + stderr) instead.
    from hivemind.utils.logging import use_hivemind_log_handler

    use_hivemind_log_handler("nowhere")
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.captureWarnings(True)
    warnings.filterwarnings("ignore", module="trl")
    return path
