"""Private swarms in the app: the wizard makes or stores the swarm's admission secret through the node's seam
(node.swarm.admission, the secret store), never in config.toml or a log, and the header's invite carries it.

The wizard's node queries are answered at once here (their real answers are tested in test_app_wizard), so these
tests start no child process."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from PySide6.QtWidgets import QAbstractButton, QApplication, QLabel, QLineEdit, QWidget

from app import wizard as wizard_module
from app.wizard import SetupWizard, SwarmPage
from node.config import NodeConfig
from node.events import NodeStarted
from node.secret_store import PASSPHRASE_ENV
from tests.conftest import STORE_PASSPHRASE
from node.swarm import admission as swarm_secret
from node.swarm.invite import format_invite, parse_invite
from tests.apphelpers import make_window
from tests.test_app_wizard import PEER, answered_at_once  # noqa: F401 - fixture
from tests.wizard_clicks import click, press_finish, type_into, walk_to

ADDRESS = f"/ip4/192.168.1.7/tcp/31337/p2p/{PEER}"
SECRET = "kq3V+a/b=c&d?e%f-team-secret"  # characters a URL query must escape
PASSPHRASE = STORE_PASSPHRASE  # the conftest fixture `unlocked` sets it


pytestmark = pytest.mark.usefixtures("answered_at_once")


def config_in(folder: Path, **swarm) -> NodeConfig:
    return NodeConfig.build({"run": {"data_dir": str(folder / "data")}, "swarm": swarm})


def open_wizard(qtbot, config: NodeConfig, folder: Path) -> SetupWizard:
    """The wizard on its swarm step, reached by pressing Next."""
    wizard = SetupWizard(config, folder / "networks.toml")
    qtbot.addWidget(wizard)
    wizard.show()
    walk_to(qtbot, wizard, wizard.swarm_page)
    return wizard


def written(secret: str) -> set[str]:
    """The secret as it may be written: bare, or URL-encoded as in an invite's query."""
    return {secret, quote(secret, safe=""), quote_plus(secret), quote_plus(secret, safe="/")}


def assert_nowhere(folder: Path, secret: str) -> None:
    """The secret is in no file under ``folder`` (the store's files are sealed)."""
    for path in folder.rglob("*"):
        if path.is_file():
            assert not any(form.encode() in path.read_bytes() for form in written(secret)), f"plaintext secret in {path}"


def shown_texts(root: QWidget) -> list[str]:
    """Every text and tooltip the window shows (labels, buttons, line edits), and its status bar."""
    texts = [root.statusBar().currentMessage()] if hasattr(root, "statusBar") else []
    for widget in root.findChildren(QWidget):
        texts.append(widget.toolTip())
        if isinstance(widget, (QLabel, QAbstractButton, QLineEdit)):
            texts.append(widget.text())
    return texts


def test_the_wizard_starts_a_private_swarm_with_its_secret_in_the_store_only(qtbot, tmp_path, locked, caplog):
    caplog.set_level(logging.DEBUG)
    wizard = open_wizard(qtbot, config_in(tmp_path), tmp_path)
    page = wizard.swarm_page
    type_into(page.swarm_name, "team")
    assert page.new.isChecked() and not page.private.isChecked()  # public unless asked
    assert page.copy.isEnabled() and parse_invite(page.invite_preview.text()).admission_secret is None
    assert not page.passphrase_box.isVisibleTo(page)
    assert not page.private_info.isVisible()  # a public swarm has no secret to speak of

    click(page.private)
    assert "invite" in page.private.text() and "secret" in page.private_info.text() and page.private_info.isVisible()
    # The secret is made at Finish: no invite without it to copy meanwhile.
    assert page.invite_preview.text() == "" and not page.copy.isEnabled()
    # No keyring, no passphrase known: the page asks for the store's.
    assert page.passphrase_box.isVisibleTo(page) and not page.isComplete()
    type_into(page.passphrase, PASSPHRASE)
    assert not page.isComplete()  # typed twice: a typo would lock the secret away
    assert not wizard.button(wizard.WizardButton.FinishButton).isEnabled()
    type_into(page.repeat, PASSPHRASE)
    assert page.isComplete()
    press_finish(qtbot, wizard)

    config = wizard.result_config
    assert config is not None and config.swarm.swarm_name == "team" and wizard.passphrase == PASSPHRASE
    secret = swarm_secret.load(config.run.data_dir, "team", PASSPHRASE)
    assert secret is not None and swarm_secret.load(config.run.data_dir, "other", PASSPHRASE) is None
    config.save(tmp_path / "data" / "config.toml")
    assert_nowhere(tmp_path, secret)
    assert secret not in caplog.text

    # Opened again from Settings: the swarm is shown private and keeps its secret (invites already shared stay valid).
    again = open_wizard(qtbot, config, tmp_path)
    assert again.swarm_page.private.isChecked()
    type_into(again.swarm_page.passphrase, PASSPHRASE)
    type_into(again.swarm_page.repeat, PASSPHRASE)
    press_finish(qtbot, again)
    assert swarm_secret.load(config.run.data_dir, "team", PASSPHRASE) == secret
    # Made public: the secret is forgotten.
    public = open_wizard(qtbot, config, tmp_path)
    click(public.swarm_page.private)
    assert not public.swarm_page.passphrase_box.isVisibleTo(public.swarm_page)
    press_finish(qtbot, public)
    assert not swarm_secret.exists(config.run.data_dir, "team")


def test_a_wrong_or_missing_passphrase_keeps_the_wizard_open_and_says_why(qtbot, tmp_path, locked):
    config = config_in(tmp_path)
    swarm_secret.remember(config.run.data_dir, config.swarm.swarm_name, SECRET, PASSPHRASE)
    wizard = open_wizard(qtbot, config, tmp_path)
    page = wizard.swarm_page
    assert page.private.isChecked()
    type_into(page.passphrase, "not the passphrase")
    type_into(page.repeat, "not the passphrase")
    press_finish(qtbot, wizard)
    assert wizard.isVisible() and wizard.currentPage() is page  # still open, on the page that says why
    assert wizard.result_config is None and "Wrong passphrase" in page.secret_status.text()
    assert swarm_secret.load(config.run.data_dir, config.swarm.swarm_name, PASSPHRASE) == SECRET


def test_joining_with_a_private_invite_stores_its_secret_through_the_seam(qtbot, tmp_path, unlocked, caplog):
    caplog.set_level(logging.DEBUG)
    wizard = open_wizard(qtbot, config_in(tmp_path), tmp_path)
    page = wizard.swarm_page
    click(page.join)
    type_into(page.invite_text, format_invite("study-group", [ADDRESS], "sapo", SECRET))
    assert page.isComplete() and "private" in page.invite_status.text() and SECRET not in page.invite_status.text()
    assert not page.passphrase_box.isVisibleTo(page)  # the environment unlocks the store
    press_finish(qtbot, wizard)
    config = wizard.result_config
    assert swarm_secret.load(config.run.data_dir, "study-group") == SECRET
    config.save(tmp_path / "data" / "config.toml")
    assert_nowhere(tmp_path, SECRET)
    assert SECRET not in caplog.text

    # An invite without a secret (written by hand) leaves the stored one.
    rejoin = open_wizard(qtbot, config, tmp_path)
    click(rejoin.swarm_page.join)
    type_into(rejoin.swarm_page.invite_text, format_invite("study-group", [ADDRESS]))
    press_finish(qtbot, rejoin)
    assert swarm_secret.load(config.run.data_dir, "study-group") == SECRET


def started(swarm_name: str, game: str = "sapo") -> NodeStarted:
    return NodeStarted(peer_id=PEER, peer_name="calm-fox", swarm_name=swarm_name, invite=[ADDRESS], model="bundled",
                       device="cpu", hardware={}, run_dir="", resumed_from_round=None, game=game)


def test_the_headers_invite_of_a_private_swarm_carries_its_secret_and_says_so(qtbot, tmp_path, unlocked, caplog):
    caplog.set_level(logging.DEBUG)
    config = config_in(tmp_path, swarm_name="study-group")
    swarm_secret.remember(config.run.data_dir, "study-group", SECRET)
    window = make_window(qtbot, config)
    window.supervisor.feed(started("study-group", game="multistage"))
    header = window.header
    header.copy_invite.click()
    invite = parse_invite(QApplication.clipboard().text())
    assert invite.admission_secret == SECRET and invite.swarm_name == "study-group" and invite.game == "multistage"
    assert header.invite_note.isVisibleTo(header) and "includes the swarm's secret" in header.invite_note.text()
    assert not any(form in text for form in written(SECRET) for text in [*shown_texts(window), window.diagnostics()])
    assert SECRET not in caplog.text
    assert_nowhere(tmp_path, SECRET)

    # The joiner's wizard takes the pasted invite as private, and would store its secret.
    other = config_in(tmp_path / "joiner")
    page = SwarmPage(other, wizard_module.IdentityPage(other), tmp_path / "networks.toml")
    qtbot.addWidget(page)
    page.show()
    click(page.join)
    type_into(page.invite_text, QApplication.clipboard().text())
    assert page.isComplete() and page.admission_secret() == SECRET


def test_the_headers_invite_of_a_public_swarm_has_no_secret_and_no_note(qtbot, tmp_path, unlocked):
    config = config_in(tmp_path, swarm_name="open-swarm")
    swarm_secret.remember(config.run.data_dir, "another-swarm", SECRET)  # a secret of another swarm stays out
    window = make_window(qtbot, config)
    window.supervisor.feed(started("open-swarm"))
    window.header.copy_invite.click()
    invite = parse_invite(QApplication.clipboard().text())
    assert invite.admission_secret is None and invite.swarm_name == "open-swarm" and invite.peers == (ADDRESS,)
    assert not window.header.invite_note.isVisibleTo(window.header)


def test_a_private_swarm_whose_secret_cannot_be_read_offers_no_invite(qtbot, tmp_path, locked):
    config = config_in(tmp_path, swarm_name="study-group")
    swarm_secret.remember(config.run.data_dir, "study-group", SECRET, PASSPHRASE)
    window = make_window(qtbot, config)
    window.supervisor.feed(started("study-group"))
    header = window.header
    assert not header.copy_invite.isEnabled() and header.invite == ""
    assert header.invite_note.isVisibleTo(header) and "cannot be read" in header.invite_note.text() and "No invite" in header.invite_note.text()
    window.supervisor.environment[PASSPHRASE_ENV] = PASSPHRASE  # the passphrase the app asked for at start
    window.supervisor.feed(started("study-group"))
    assert header.copy_invite.isEnabled() and parse_invite(header.invite).admission_secret == SECRET


def test_the_app_asks_for_the_stores_passphrase_at_start_for_a_private_swarm(qtbot, tmp_path, locked, monkeypatch):
    """Without a keyring the node needs the passphrase to read the swarm's secret: the app asks once, and checks it."""
    from app import gui

    answers = ["not the passphrase", PASSPHRASE]
    prompts = []

    def ask(parent, title, prompt, echo):
        prompts.append((title, prompt))
        return answers.pop(0), True

    monkeypatch.setattr(gui.QInputDialog, "getText", ask)
    public = config_in(tmp_path / "public")
    desktop = gui.DesktopApp(QApplication.instance(), tmp_path / "config.toml")
    desktop.unlock_secrets(public)
    assert prompts == [] and PASSPHRASE_ENV not in desktop.supervisor.environment  # nothing to unlock

    private = config_in(tmp_path, swarm_name="study-group")
    swarm_secret.remember(private.run.data_dir, "study-group", SECRET, PASSPHRASE)
    desktop.unlock_secrets(private)
    assert [title for title, _ in prompts] == ["Unlock private swarm"] * 2 and "Wrong passphrase" in prompts[1][1]
    assert desktop.supervisor.environment[PASSPHRASE_ENV] == PASSPHRASE


def test_a_private_swarm_on_a_laptop_screen_scrolls_and_squeezes_no_field(qtbot, tmp_path, locked):
    wizard = open_wizard(qtbot, config_in(tmp_path), tmp_path)
    wizard.resize(wizard.width(), 600)  # what a 1024x700 screen leaves
    page = wizard.swarm_page
    click(page.private)  # the secret's explanation and the store's passphrase appear
    qtbot.waitUntil(lambda: page.passphrase_box.isVisible(), timeout=5_000)

    def squeezed() -> list[str]:
        return [widget.objectName() or type(widget).__name__
                for widget in (page.swarm_name, page.game, page.port, page.private, page.private_info,
                               page.invite_preview, page.passphrase, page.repeat)
                if widget.height() < widget.minimumSizeHint().height()]

    qtbot.waitUntil(lambda: not squeezed(), timeout=3_000)  # once the layout has settled
