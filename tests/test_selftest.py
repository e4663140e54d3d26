"""``rl-swarm --self-test``: a real solo node process trains one round and stops; failures say what went wrong."""

from __future__ import annotations

import sys

import pytest

from node.cli import selftest


@pytest.mark.slow
def test_self_test_trains_one_round_in_a_node_process_and_passes(tiny_model_dir, tmp_path, capsys):
    code = selftest.run_self_test(["--self-test", "--data-dir", str(tmp_path), "--model", str(tiny_model_dir)])
    out = capsys.readouterr().out
    assert code == selftest.EXIT_OK, out
    assert "node started" in out and "round 0 finished" in out and "self-test passed" in out
    assert (tmp_path / "runs" / "self-test" / "metrics.jsonl").read_text().count("\n") == 1
    # Again in the same folder (how the smoke test times a warm start): a fresh run, not a finished one resumed.
    assert selftest.run_self_test(["--data-dir", str(tmp_path), "--model", str(tiny_model_dir)]) == 0
    assert "round 0 finished" in capsys.readouterr().out


def test_self_test_fails_with_the_nodes_own_message_and_hint(tmp_path, capsys):
    result = selftest.run(tmp_path, model=str(tmp_path / "missing.gguf"), progress=lambda line: None)
    assert not result.ok
    assert result.message == f"no GGUF file at {tmp_path / 'missing.gguf'}" and "bundled" in result.hint
    assert "node_exited" in result.timings


def test_self_test_reports_a_node_that_never_finishes(tmp_path):
    result = selftest.run(tmp_path, timeout_s=1, progress=lambda line: None,
                          argv=[sys.executable, "-c", "import time; time.sleep(60)"])
    assert not result.ok and "did not finish one round within 1 s" in result.message
