"""Inside a PyInstaller bundle the bundled model is a data file under sys._MEIPASS, not an installed package."""

from __future__ import annotations

import sys

import pytest

from node.errors import NodeError
from node.learning import models


def test_a_frozen_bundle_finds_the_model_in_its_own_data(tmp_path, monkeypatch):
    shipped = tmp_path / models.BUNDLED_PACKAGE_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
    shipped.parent.mkdir()
    shipped.symlink_to(models.resolve(models.BUNDLED).path_or_id + "/SmolLM2-135M-Instruct.Q4_1.gguf")
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    resolved = models.resolve(models.BUNDLED)
    assert (resolved.path_or_id, resolved.gguf_file) == (str(shipped.parent), shipped.name)


def test_a_frozen_bundle_without_the_model_says_to_reinstall(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    with pytest.raises(NodeError, match="bundled model is missing") as caught:
        models.resolve(models.BUNDLED)
    assert caught.value.hint == "reinstall RL Swarm"
