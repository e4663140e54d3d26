"""The fleet view, pressed as a user presses it: saved remote nodes, a node on the far side of a real sshd started,
watched (charts full from its history), paused, lost and found again without noticing, read and stopped."""

from __future__ import annotations


import psutil
import pytest
from PySide6.QtCore import QTimer, Qt
from PySide6.QtWidgets import QApplication, QDialog

from app.fleet import COLUMNS, FleetView
from node.config import NodeConfig
from node.runstore import RunStore
from tests.apphelpers import make_window
from tests.nodes import tiny_config
from tests.test_control_socket import node_over_ssh, ssh_server  # noqa: F401 (fixture)

START_MS = 300_000


def cell(fleet: FleetView, name: str, column: str) -> str:
    return fleet.table.item(fleet.row_of(name), COLUMNS.index(column)).text()


def click_row(qtbot, fleet: FleetView, name: str) -> None:
    rect = fleet.table.visualItemRect(fleet.table.item(fleet.row_of(name), 0))
    qtbot.mouseClick(fleet.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert fleet.selected is fleet.node(name)


def open_fleet_tab(qtbot, window) -> FleetView:
    bar = window.tabs.tabBar()
    index = window.tabs.indexOf(window.fleet)
    qtbot.mouseClick(bar, Qt.MouseButton.LeftButton, pos=bar.tabRect(index).center())
    assert window.tabs.currentWidget() is window.fleet
    return window.fleet


def fill_dialog(qtbot, fields: dict[str, str], done: list) -> None:
    dialog = next(w for w in QApplication.topLevelWidgets() if w.objectName() == "addRemote" and w.isVisible())
    for name, text in fields.items():
        getattr(dialog, name).setText(text)
    qtbot.mouseClick(dialog.save_button, Qt.MouseButton.LeftButton)
    done.append(dialog)


def test_saving_and_removing_a_remote_node_from_the_fleet_view(qtbot, tmp_path):
    window = make_window(qtbot, NodeConfig.build({"run": {"data_dir": str(tmp_path / "data")}}))
    window.show()
    fleet = open_fleet_tab(qtbot, window)
    assert fleet.table.rowCount() == 1 and cell(fleet, fleet.nodes[0].name, "Where") == "this computer"

    dialogs: list[QDialog] = []
    QTimer.singleShot(0, lambda: fill_dialog(qtbot, {"name": "gpu box", "host": "127.0.0.1"}, dialogs))
    QTimer.singleShot(200, lambda: (fill_dialog(qtbot, {"name": "gpu-box"}, dialogs)))
    qtbot.mouseClick(fleet.add_button, Qt.MouseButton.LeftButton)
    first = dialogs[0]
    assert "name" in first.error.text() and first.result_config is not None, "a bad name is explained, then fixed"

    saved = NodeConfig.load(window.config_path)
    assert [(r.name, r.host) for r in saved.fleet.remotes] == [("gpu-box", "127.0.0.1")]
    assert window.config.fleet.remotes == saved.fleet.remotes
    assert fleet.table.rowCount() == 2
    qtbot.waitUntil(lambda: cell(fleet, "gpu-box", "Connection").startswith("Lost"), timeout=60_000)
    assert "retrying" in cell(fleet, "gpu-box", "Connection")

    click_row(qtbot, fleet, "gpu-box")
    assert not fleet.start_button.isEnabled(), "nothing to start while the computer cannot be reached"
    qtbot.mouseClick(fleet.remove_button, Qt.MouseButton.LeftButton)
    assert fleet.table.rowCount() == 1 and NodeConfig.load(window.config_path).fleet.remotes == []


def far_node_processes(run_dir) -> list[psutil.Process]:
    config = str(run_dir / "config.toml")
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "run" in cmdline and config in cmdline:
            found.append(process)
    return found


def attach_processes(data_dir) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"])
            if "attach" in (p.info["cmdline"] or []) and str(data_dir) in (p.info["cmdline"] or []) and
            not (p.info["cmdline"] or [""])[0].endswith("ssh")]


@pytest.mark.slow
def test_a_remote_node_is_started_watched_paused_survives_a_lost_connection_and_stops(
        qtbot, ssh_server, tiny_model_dir, tmp_path):  # noqa: F811
    far = tiny_config(tiny_model_dir, tmp_path / "far")
    far.save(far.run_dir / "config.toml")
    remote = node_over_ssh(ssh_server, tmp_path / "far")
    here = NodeConfig.build({"run": {"data_dir": str(tmp_path / "here")},
                             "fleet": {"remotes": [remote.model_dump(mode="json")]}})
    window = make_window(qtbot, here)
    window.show()
    fleet = open_fleet_tab(qtbot, window)
    qtbot.waitUntil(lambda: cell(fleet, "box", "Connection") == "Connected", timeout=60_000)
    qtbot.waitUntil(lambda: cell(fleet, "box", "State") == "Stopped", timeout=10_000)
    click_row(qtbot, fleet, "box")
    assert fleet.start_button.isEnabled() and not fleet.pause_button.isEnabled()

    qtbot.mouseClick(fleet.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: cell(fleet, "box", "Round") not in ("-", "0"), timeout=START_MS)
    assert fleet.dashboard.point_count("local") >= 2 and cell(fleet, "box", "Reward") != "-"
    assert cell(fleet, "box", "Held-out accuracy").endswith("%"), "the round-0 evaluation came through"
    assert "(" in cell(fleet, "box", "Node"), "the node's peer name"
    [node] = far_node_processes(far.run_dir)

    qtbot.mouseClick(fleet.pause_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: cell(fleet, "box", "State") == "Paused", timeout=START_MS)
    assert fleet.resume_button.isEnabled()

    ssh_server.stop()  # the computer drops off the network
    qtbot.waitUntil(lambda: cell(fleet, "box", "Connection").startswith("Lost"), timeout=60_000)
    assert "retrying" in cell(fleet, "box", "Connection") and not fleet.stop_button.isEnabled()
    assert cell(fleet, "box", "State") == "Paused (last known)"
    assert node.is_running() and node.status() != psutil.STATUS_ZOMBIE, "a lost connection never stops the node"
    attempts = fleet.node("box").link.attempts
    qtbot.waitUntil(lambda: fleet.node("box").link.attempts > attempts, timeout=30_000)  # retried, with backoff

    ssh_server.start()  # back on the network
    qtbot.waitUntil(lambda: cell(fleet, "box", "Connection") == "Connected", timeout=90_000)
    qtbot.waitUntil(lambda: cell(fleet, "box", "State") == "Paused", timeout=10_000)
    history = RunStore(far.run_dir).metrics()
    qtbot.waitUntil(lambda: fleet.dashboard.point_count("local") == len(history), timeout=10_000)
    assert cell(fleet, "box", "Round") == str(history[-1].round), "the history came again with the new connection"

    qtbot.mouseClick(fleet.resume_button, Qt.MouseButton.LeftButton)
    paused_at = history[-1].round
    qtbot.waitUntil(lambda: int(cell(fleet, "box", "Round")) > paused_at, timeout=START_MS)

    qtbot.mouseClick(fleet.logs_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "control socket" in fleet.log_text.toPlainText(), timeout=60_000)
    assert fleet.log_dialog.isVisible() and "box" in fleet.log_dialog.windowTitle()

    qtbot.mouseClick(fleet.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: cell(fleet, "box", "State") == "Stopped", timeout=START_MS)
    node.wait(120)
    assert fleet.start_button.isEnabled(), "it can be started again"

    fleet.close_links()
    qtbot.waitUntil(lambda: not attach_processes(tmp_path / "far"), timeout=30_000)  # nothing left over there
