"""Layering: the node core never imports Qt (import-linter contract in pyproject.toml); the GUI never imports torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_node_imports_no_qt():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


def test_the_gui_process_never_imports_the_training_stack():
    """torch, hivemind and friends live in the node process; the GUI stays small and starts fast."""
    code = (
        "import sys; import app.main, app.gui, app.main_window, app.wizard, app.supervisor, app.dashboard; "
        "print(','.join(m for m in ('torch', 'hivemind', 'transformers', 'trl', 'reasoning_gym') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
