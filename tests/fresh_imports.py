"""What a fresh interpreter imports: for tests that keep a process (the GUI, a CLI command) off the training stack."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_and_list_imports(statements: str, watched: tuple[str, ...], **env: str) -> tuple[list[str], list[str]]:
    """Run ``statements`` in a new interpreter; return what they printed (lines) and which of ``watched`` it imported."""
    code = f"import sys\n{statements}\nprint(','.join(m for m in {watched!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, **env})
    assert result.returncode == 0, result.stderr
    *printed, imported = result.stdout.splitlines()
    return printed, [m for m in imported.split(",") if m]
