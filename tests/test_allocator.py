"""glibc malloc settings: in the environment of node children, and applied in-process to a node started by hand."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from node import allocator
from node.launch import node_environment


def test_node_children_get_the_malloc_settings_unless_the_user_set_them(monkeypatch):
    for name in allocator.MALLOC_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(allocator.CHOICE_ENV, "glibc")
    env = node_environment()
    assert {k: env[k] for k in allocator.MALLOC_ENV} == allocator.MALLOC_ENV
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert node_environment()["MALLOC_ARENA_MAX"] == "8"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_tame_heap_applies_mallopt_except_where_the_environment_chose():
    code = (
        "import json, os; from node import allocator; "
        "print(json.dumps(allocator.tame_heap()))"
    )
    clean = {k: v for k, v in node_environment().items() if k not in allocator.MALLOC_ENV}
    out = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        '{"MALLOC_ARENA_MAX": 2, "MALLOC_MMAP_THRESHOLD_": 131072, "MALLOC_TRIM_THRESHOLD_": 134217728}'
    )
    chosen = {**clean, "MALLOC_ARENA_MAX": "4"}
    out = subprocess.run([sys.executable, "-c", code], env=chosen, capture_output=True, text=True, check=True)
    assert "MALLOC_ARENA_MAX" not in out.stdout


def test_jemalloc_is_preloaded_where_installed_unless_the_user_chose_otherwise():
    installed = {allocator.JEMALLOC_PATHS[0]}.__contains__
    env = allocator.allocator_env({}, exists=installed)
    if not sys.platform.startswith("linux"):
        assert env == allocator.MALLOC_ENV
        return
    assert env == {"LD_PRELOAD": allocator.JEMALLOC_PATHS[0], "MALLOC_CONF": allocator.JEMALLOC_CONF}
    assert allocator.allocator_env({allocator.CHOICE_ENV: "glibc"}, exists=installed) == allocator.MALLOC_ENV
    assert allocator.allocator_env({"LD_PRELOAD": "/opt/mine.so"}, exists=installed) == allocator.MALLOC_ENV
    assert allocator.allocator_env({}, exists=lambda path: False) == allocator.MALLOC_ENV  # not installed


@pytest.mark.skipif(not any(os.path.isfile(p) for p in allocator.JEMALLOC_PATHS),
                    reason="jemalloc is not installed here (Debian: libjemalloc2)")
def test_a_node_child_really_runs_on_jemalloc_where_installed(monkeypatch):
    monkeypatch.delenv(allocator.CHOICE_ENV, raising=False)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    code = "print('libjemalloc' in open('/proc/self/maps').read())"
    out = subprocess.run([sys.executable, "-c", code], env=node_environment(), capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "True"
