"""glibc malloc settings that keep a training node's resident memory flat over many rounds.

Every GRPO step allocates and frees hundreds of megabytes of tensors of varying sizes. With glibc's defaults a
freed block above the (dynamically raised) mmap threshold goes back into the heap instead of the OS, and torch's
threads each grow an arena of their own; the heap then fragments and RSS grows round after round (~2 GB per round
measured with the bundled model). Serving every block of 128 KiB or more with its own mmap returns it to the OS
on free, and two arenas bound the per-thread heaps.

The settings reach a node in two ways:

* :data:`MALLOC_ENV`, put in the environment of every node child (:func:`node.launch.node_environment`), so glibc
  reads it before the first allocation;
* :func:`tame_heap`, called by a node at start-up: ``mallopt`` applies the same limits to a process that was started
  by hand (``python -m node run``) without them, for every allocation from then on. A variable the user set
  explicitly wins in both cases.

Other C libraries (macOS, musl) ignore both.

Those settings keep RSS flat at a price: every block of 128 KiB or more is a fresh mmap, page-faulted in and zeroed
by the kernel each time, so ~16 % of a node's CPU time went to the kernel (bench/allocator.py). Where the system has
jemalloc (Debian and Ubuntu: ``libjemalloc2``), node children get it instead (:func:`allocator_env`): it keeps RSS
as flat (two arenas, dirty pages returned after two seconds by a background thread) with ~5 % in the kernel.
``RL_SWARM_ALLOCATOR=glibc`` keeps glibc with the settings above, ``jemalloc`` insists on jemalloc where found;
an ``LD_PRELOAD`` the user set is left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

MMAP_THRESHOLD_BYTES = 128 * 1024
ARENA_MAX = 2
MALLOC_ENV = {
    "MALLOC_ARENA_MAX": str(ARENA_MAX),
    "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD_BYTES),
    # A fixed mmap threshold also fixes the trim threshold's default; trim the heap top past 128 MiB.
    "MALLOC_TRIM_THRESHOLD_": str(128 * 2**20),
}
CHOICE_ENV = "RL_SWARM_ALLOCATOR"  # auto (jemalloc where installed, else glibc tamed) | glibc | jemalloc
JEMALLOC_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
    "/usr/lib64/libjemalloc.so.2", "/usr/lib/libjemalloc.so.2", "/usr/local/lib/libjemalloc.so.2",
)
JEMALLOC_CONF = "background_thread:true,dirty_decay_ms:2000,muzzy_decay_ms:0,narenas:2"
# mallopt parameter numbers from glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_MALLOPT = {
    "MALLOC_ARENA_MAX": _M_ARENA_MAX,
    "MALLOC_MMAP_THRESHOLD_": _M_MMAP_THRESHOLD,
    "MALLOC_TRIM_THRESHOLD_": _M_TRIM_THRESHOLD,
}


def allocator_env(environ: Mapping[str, str] = os.environ,
                  exists: Callable[[str], bool] = os.path.isfile) -> dict[str, str]:
    """The variables that pick and tune the allocator of a node child: jemalloc where installed (Linux), else
    :data:`MALLOC_ENV`; see the module's docstring for the choice."""
    choice = environ.get(CHOICE_ENV, "auto").strip().lower()
    if choice != "glibc" and sys.platform.startswith("linux") and not environ.get("LD_PRELOAD"):
        library = next((path for path in JEMALLOC_PATHS if exists(path)), None)
        if library is not None:
            return {"LD_PRELOAD": library, "MALLOC_CONF": JEMALLOC_CONF}
        if choice == "jemalloc":
            log.warning("%s=jemalloc, but no libjemalloc.so.2 is installed: glibc's malloc is used", CHOICE_ENV)
    return dict(MALLOC_ENV)


def tame_heap() -> dict[str, int]:
    """Apply :data:`MALLOC_ENV` to this process with ``mallopt`` where glibc runs; return what was set."""
    libc = _glibc()
    if libc is None:
        return {}
    applied = {}
    for name, value in MALLOC_ENV.items():
        if name in os.environ:  # set before start: glibc already read it, and it is the user's choice
            continue
        if libc.mallopt(_MALLOPT[name], int(value)) == 1:
            applied[name] = int(value)
        else:
            log.warning("mallopt(%s=%s) was refused", name, value)
    return applied


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):  # musl has no mallopt tuning
        return None
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    libc.mallopt.restype = ctypes.c_int
    return libc
