"""Shared fixtures: an offline, quiet, deterministic environment and a tiny random model."""

from __future__ import annotations

import os

# Before anything imports transformers / torch: tests never touch the network and stay on two cores.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# The app's settings, autostart entries and saved networks go to a throw-away config folder, never the user's,
# removed when the test process exits (each xdist worker has its own; 145 of them had piled up in /tmp).
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="rl-swarm-test-config-")
atexit.register(shutil.rmtree, os.environ["XDG_CONFIG_HOME"], ignore_errors=True)

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """Files with slow tests first. Under ``--dist loadfile`` (pyproject's addopts) a file is one unit of work, handed
    to the next free worker in this order: the long files start early and short ones fill in at the end, where
    xdist's own order (most tests first) can start a two-minute file last while the other worker sits idle."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: collection order within each part


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer random Llama with the bundled SmolLM2 tokenizer, saved as a normal model folder."""
    from node.learning import models
    from tests.tiny_model import tiny_random

    return tiny_random(models.resolve(models.BUNDLED), tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture
def netbed():
    """A simulated internet (:mod:`tests.netbed`), deleted after the test whatever happens; skipped where this machine
    cannot make network namespaces."""
    from tests.netbed import Netbed, NetbedUnavailable, check_available, remove_stale_beds

    try:
        check_available()
    except NetbedUnavailable as e:
        pytest.skip(f"no simulated internet on this machine: {e}")
    remove_stale_beds()
    bed = Netbed()
    try:
        yield bed
    finally:
        bed.close()


STORE_PASSPHRASE = "store passphrase"


@pytest.fixture
def unlocked(monkeypatch) -> str:
    """The encrypted file store's passphrase in the environment (no keyring here); returns it."""
    from node.secret_store import PASSPHRASE_ENV

    monkeypatch.setenv(PASSPHRASE_ENV, STORE_PASSPHRASE)
    return STORE_PASSPHRASE


@pytest.fixture
def locked(monkeypatch) -> None:
    """No passphrase in the environment: the encrypted file store stays locked."""
    from node.secret_store import PASSPHRASE_ENV

    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
