"""bench/provenance.py: docs/results.md names the commit and command of every results file, and is kept current."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import provenance

REPO = Path(__file__).resolve().parents[1]


def _has_history() -> bool:
    try:
        shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True,
                                 text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return False
    return shallow == "false"


@pytest.mark.skipif(not _has_history(), reason="needs the repository's git history (not a shallow copy)")
def test_the_table_lists_every_results_file_with_the_commit_that_last_changed_it():
    check = subprocess.run([sys.executable, str(REPO / "bench" / "provenance.py"), "--check"], cwd=REPO,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_a_row_holds_the_recorded_command_or_says_there_is_none(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "REPO", tmp_path)
    monkeypatch.setattr(provenance, "last_commit", lambda path: ("abc1234", "2026-11-25"))
    with_command, without = tmp_path / "a.json", tmp_path / "b.json"
    with_command.write_text(json.dumps({"command": "python bench/x.py --pick a|b"}))
    without.write_text(json.dumps({"rows": []}))
    assert provenance.row(with_command) == "| `a.json` | abc1234 | 2026-11-25 | `python bench/x.py --pick a\\|b` |"
    assert provenance.row(without) == "| `b.json` | abc1234 | 2026-11-25 | -- |"
