"""Layering: the node core never imports Qt (import-linter contract in pyproject.toml); the GUI never imports torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.fresh_imports import run_and_list_imports

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_node_never_imports_qt_and_app_only_the_seam():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def test_the_gui_process_never_imports_the_training_stack():
    """torch, hivemind and friends live in the node process; the GUI stays small and starts fast."""
    _, imported = run_and_list_imports(
        "import app.main, app.gui, app.main_window, app.wizard, app.supervisor, app.dashboard",
        ("torch", "hivemind", "transformers", "trl", "reasoning_gym"), QT_QPA_PLATFORM="offscreen")
    assert imported == []


# What app/ may import from node/: the torch-free seam and read-only helpers. Everything else in node/ (the training
# stack, the swarm, the chain writers) runs in the node process only.
APP_MAY_IMPORT = {
    "node.api", "node.config", "node.errors", "node.events", "node.swarm.invite", "node.launch", "node.process_client",
    "node.platform_support", "node.units", "node.tasks.taskref", "node.logs", "node.runstore",
    "node.notify", "node.schedule",  # webhook notifications; resource schedules and heat
    "node.cli.demo", "node.cli.selftest",  # the app's --demo and --self-test: they drive node processes
    "node.hub.auth", "node.hub.errors", "node.hub.upload", "node.secret_store", "node.swarm.admission",
    "node.chain.wallet",
    "node.chain.account", "node.chain.networks",  # the account page's read-only helper
    "node.cli.main",  # app.main: a frozen bundle re-enters itself as the node CLI
    "node.remote",  # the SSH command lines of the fleet view's remote nodes
    "node.game",  # the game's stage names and reward maxima (constants only; its modules stay in the node)
}


def test_app_imports_only_the_named_node_modules():
    import grimp

    graph = grimp.build_graph("app", "node")
    imported = {target for module in graph.find_children("app") for target in graph.find_modules_directly_imported_by(module)
                if target.startswith("node")}
    assert imported - {"node", "node.chain"} <= APP_MAY_IMPORT, sorted(imported - APP_MAY_IMPORT)
    assert "node.api" in imported  # the wizard decodes the node's answers through the seam
