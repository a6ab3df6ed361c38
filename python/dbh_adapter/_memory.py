"""The process's memory figures (the `memory` objects of docs/events.md) and
hardware.memory_budget applied as dbh's own worker applies it (docs/gpu.md)."""

from __future__ import annotations

import ctypes
import os
import resource
import sys
from typing import Any

import torch

# (pointer, bytes) of the budget's ballast, held for the life of the process on
# purpose. Every memory figure the adapter reports leaves it out: it is dbh's
# emulation of a smaller card, not the training's memory (on an H200 a 12 GiB
# budget holds 129 GiB, which qualify read as the training's peak).
_BALLAST: list[tuple[int, int]] = []


def release_free_memory() -> None:
    """Gives the heap's free memory back to the system (glibc's malloc_trim),
    as dbh's own worker does before a run's end is measured: the resident
    memory then shows what the process still uses, and two runs in one
    process are enough to tell what the second kept (Note [What a run leaves
    behind])."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: the figure is read as it is


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# /proc/self/statm opened once per process (pid, descriptor) and read again
# with pread: a step's memory figure costs one system call, not an open.
_STATM: list[int] = []


def _statm() -> str:
    pid = os.getpid()
    if not _STATM or _STATM[0] != pid:
        _STATM[:] = [pid, os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)]
    return os.pread(_STATM[1], 256, 0).decode()


def memory_figures() -> dict[str, int]:
    """The process's memory; on CUDA what the training holds, without the
    budget's ballast (held in the same caching allocator)."""
    rss = 0
    try:
        rss = int(_statm().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = {"rss_bytes": rss, "peak_rss_bytes": max(peak, rss)}
    # Initialised implies available, and is a flag read (the availability
    # check asks the driver: measurable once a step).
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        held = sum(size for _, size in _BALLAST)
        out.update(cuda_allocated_bytes=max(0, torch.cuda.memory_allocated() - held),
                   cuda_reserved_bytes=max(0, torch.cuda.memory_reserved() - held),
                   cuda_peak_allocated_bytes=max(0, torch.cuda.max_memory_allocated() - held),
                   cuda_peak_reserved_bytes=max(0, torch.cuda.max_memory_reserved() - held))
    return out


def apply_memory_budget(device: str, budget: int) -> dict[str, Any]:
    """hardware.memory_budget as dbh's own worker applies it: on the CPU the
    data segment capped (RLIMIT_DATA); on CUDA a ballast holding what the card
    has beyond the budget and the caching allocator capped at the rest.
    Returns the `memory_budget` event's fields."""
    out: dict[str, Any] = {"applied": False, "method": "", "budget_bytes": budget, "device_total": 0,
                           "used_before": 0, "ballast_bytes": 0, "allocator_fraction": 0.0, "detail": ""}
    if device == "cpu":
        try:
            resource.setrlimit(resource.RLIMIT_DATA, (budget, budget))
            out["applied"] = True
        except (ValueError, OSError) as e:
            out["detail"] = f"setrlimit failed: {e}"
            return out
        out["method"] = "RLIMIT_DATA"
        out["detail"] = (f"The worker's data segment and anonymous mappings (Python, torch, tensors) are capped at "
                         f"{budget} bytes; shared libraries' code is not counted")
        return out
    if not torch.cuda.is_available():
        out["detail"] = "no CUDA device"
        return out
    d = torch.device(device)
    index = d.index if d.index is not None else 0
    torch.cuda.set_device(index)
    torch.empty(1, device=d)  # the context first, so that its memory is counted
    free, total = torch.cuda.mem_get_info(index)
    out["device_total"], out["used_before"] = total, total - free
    available = budget - (total - free)
    if available <= 0:
        out["detail"] = f"the budget is smaller than what the context already uses ({total - free} bytes)"
        return out
    ballast = max(0, free - available)
    # The ballast is a block of the caching allocator held for good: the
    # allocator's cap is the ballast plus what the budget leaves, so tensors
    # get `available` and the card's other memory stays taken. Seen on an H100
    # (reports/examples/gpu/h100-2026-11-27): an out-of-memory error under a
    # 1 GiB budget then says "78.55 GiB is allocated by PyTorch", the ballast
    # included; the detail says so.
    if ballast > 0:
        _BALLAST.append((torch.cuda.caching_allocator_alloc(ballast, index), ballast))
    fraction = min(1.0, (ballast + available) / total)
    out["ballast_bytes"] = ballast
    out["allocator_fraction"] = fraction
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    out["applied"] = True
    out["method"] = "cuda ballast + allocator limit"
    out["detail"] = (f"card {total} bytes, already used {total - free}, ballast {ballast} held in the caching "
                     f"allocator (PyTorch's out-of-memory message counts it as allocated by PyTorch; the memory dbh "
                     f"reports leaves it out), tensors capped at {available}; cuDNN/cuBLAS workspaces compete for "
                     f"the same budget")
    return out
