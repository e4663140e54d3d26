"""glibc malloc settings: in the environment of node children, applied in-process to a node started by hand, and the
heap trim after every round."""

from __future__ import annotations

import json
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
    assert out.stdout.strip() == '{"MALLOC_ARENA_MAX": 2}'
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


# Frees 128 MiB of 64 KiB blocks (below glibc's mmap threshold, so they come from the heap) behind a block still in use,
# so glibc's own trim of the heap top cannot return them; prints RSS before and after trim_heap() and what it said.
_FREED_INSIDE_THE_HEAP = """
import ctypes, json, psutil
from node import allocator
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
blocks = [libc.malloc(64 * 1024) for _ in range(2048)]
for block in blocks:
    ctypes.memset(block, 1, 64 * 1024)
pinned = libc.malloc(64 * 1024)
for block in blocks:
    libc.free(block)
before = psutil.Process().memory_info().rss
trimmed = allocator.trim_heap()
print(json.dumps([trimmed, before, psutil.Process().memory_info().rss]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_trim_heap_hands_the_pages_freed_inside_the_heap_back_to_the_os():
    clean = {k: v for k, v in node_environment().items() if k not in (*allocator.MALLOC_ENV, "LD_PRELOAD")}
    out = subprocess.run([sys.executable, "-c", _FREED_INSIDE_THE_HEAP], env=clean, capture_output=True, text=True,
                         check=True)
    trimmed, before, after = json.loads(out.stdout)
    assert trimmed and before - after > 100 * 2**20, (before, after)


@pytest.mark.skipif(not any(os.path.isfile(p) for p in allocator.JEMALLOC_PATHS),
                    reason="jemalloc is not installed here (Debian: libjemalloc2)")
def test_trim_heap_does_nothing_where_another_malloc_serves_the_process():
    library = next(p for p in allocator.JEMALLOC_PATHS if os.path.isfile(p))
    env = {**node_environment(), "LD_PRELOAD": library}
    code = "from node import allocator; print(allocator.trim_heap())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_trim_heap_does_nothing_without_glibc(monkeypatch):
    allocator._glibc_malloc.cache_clear()
    monkeypatch.setattr(allocator, "_glibc", lambda: None)  # macOS, Windows, musl
    try:
        assert allocator.trim_heap() is False
    finally:
        allocator._glibc_malloc.cache_clear()
