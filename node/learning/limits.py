"""Keep training from taking over the machine: cap torch's CPU threads and its share of GPU memory."""

from __future__ import annotations

import contextlib
import os

import torch

from node.api import default_threads
from node.errors import NodeError


def apply_resource_limits(*, threads: int | None, gpu_memory_fraction: float | None, device: str) -> dict:
    """Apply the limits and return what took effect (a fraction for a CPU device is ignored and reported None).

    Call it early: torch accepts the inter-op thread count only before its first parallel work.
    """
    if threads is None:
        threads = default_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise NodeError(
            f"threads must be a whole number of at least 1, got {threads!r}",
            hint="leave it unset to use all physical cores but one",
        )
    if gpu_memory_fraction is not None and not 0 < gpu_memory_fraction <= 1:
        raise NodeError(
            f"gpu_memory_fraction must be in (0, 1], got {gpu_memory_fraction!r}",
            hint="e.g. 0.8 leaves a fifth of the GPU memory to other programs; leave it unset for no cap",
        )

    torch.set_num_threads(threads)
    # Raises once set or once parallel work has started; torch then keeps the pool it has.
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(threads)
    # Child processes (data workers, tokenizers) start their own OpenMP/MKL pools from these.
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)

    applied_fraction = None
    backend = device.split(":")[0]
    if gpu_memory_fraction is not None and backend == "cuda":
        torch.cuda.set_per_process_memory_fraction(gpu_memory_fraction, torch.device(device))
        applied_fraction = gpu_memory_fraction
    elif gpu_memory_fraction is not None and backend == "mps":
        torch.mps.set_per_process_memory_fraction(gpu_memory_fraction)
        applied_fraction = gpu_memory_fraction

    return {
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "gpu_memory_fraction": applied_fraction,
    }
