"""What the training runs on and what it leaves behind: `hello`'s
`environment` (the report's Environment shows the worker's own stack instead
of dbh's LibTorch) and `run_end`'s `resources`."""

from __future__ import annotations

import os
import platform
import threading

import torch


def environment(device: str, lightning_version: str = "") -> dict[str, str]:
    """The worker's stack, every value a string, empty ones left out: `python`,
    `torch`, `cuda` (torch's build), `cudnn`, `lightning`, `device`,
    `device_name`."""
    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda or "",
           "cudnn": "", "lightning": lightning_version, "device": device, "device_name": ""}
    # torch leaves cudnn.is_available and cudnn.version unannotated.
    if torch.backends.cudnn.is_available():  # type: ignore[no-untyped-call]
        out["cudnn"] = str(torch.backends.cudnn.version() or "")  # type: ignore[no-untyped-call]
    if device.startswith("cuda") and torch.cuda.is_available():
        try:
            out["device_name"] = torch.cuda.get_device_name(torch.device(device))
        except (RuntimeError, AssertionError, ValueError):
            pass
    elif device == "cpu":
        out["device_name"] = _cpu_name()
    return {k: v for k, v in out.items() if v}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor()


def resources() -> dict[str, int]:
    """What the process holds at the run's end (Linux): `open_files` (its
    descriptors), `threads` (the kernel's count, torch's pools included) and
    `children` (processes whose parent it is: loader workers left running).
    {} where /proc cannot say."""
    out: dict[str, int] = {}
    try:
        out["open_files"] = len(os.listdir("/proc/self/fd")) - 1  # without the listing's own descriptor
    except OSError:
        return {}
    out["threads"] = _status_threads() or threading.active_count()
    out["children"] = _children(os.getpid())
    return out


def _status_threads() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _children(pid: int) -> int:
    """Processes whose parent is `pid` (one pass over /proc)."""
    count = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1] == str(pid):
            count += 1
    return count
