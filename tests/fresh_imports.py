"""Code run in a fresh interpreter: for what only a new process shows (what a CLI command or the GUI imports, state
a library fixes once per process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_fresh(code: str, **env: str) -> str:
    """Run ``code`` in a new interpreter from the repository root, with ``env`` added; return what it printed."""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, **env})
    assert result.returncode == 0, result.stderr
    return result.stdout


def run_and_list_imports(statements: str, watched: tuple[str, ...], **env: str) -> tuple[list[str], list[str]]:
    """Run ``statements`` in a new interpreter; return what they printed (lines) and which of ``watched`` it imported."""
    out = run_fresh(f"import sys\n{statements}\nprint(','.join(m for m in {watched!r} if m in sys.modules))", **env)
    *printed, imported = out.splitlines()
    return printed, [m for m in imported.split(",") if m]
