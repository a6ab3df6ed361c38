"""`train.mode: ops` (capability `ops`): basic tensor operations in the
worker's own torch on the scenario's device, a convolution's forward and
backward and a matrix product, instead of the training: the first rung of
`dbh diagnose`, which tells the device and its libraries from the training.
As dbh's own worker does (run_ops_check in harness/worker/worker.cc): three
steps, each a `step_end` with `ops` and the result as its loss."""

from __future__ import annotations

import math
import os
import sys
import traceback
from typing import NoReturn

import torch

from ._events import EventWriter

OPS_STEPS = 3


def ops_step(device: torch.device) -> float:
    """One step of the check: a 3×3 convolution with its backward and a
    256×256 matrix product; raises when a value is not finite."""
    a = torch.randn(256, 256, device=device)
    x = torch.randn(2, 16, 32, 32, device=device, requires_grad=True)
    w = torch.randn(32, 16, 3, 3, device=device, requires_grad=True)
    y = torch.nn.functional.conv2d(x, w, padding=1).relu().sum() + (a @ a).mean()
    y.backward()  # type: ignore[no-untyped-call]
    value = float(y.item())
    grads_finite = bool(torch.isfinite(x.grad).all()) and bool(torch.isfinite(w.grad).all())  # type: ignore[arg-type]
    if not math.isfinite(value) or not grads_finite:
        raise RuntimeError(f"basic tensor ops produced non-finite values on {device}")
    return value


def run_ops_check(events: EventWriter, device: str, seed: int) -> NoReturn:
    """The check, its events (`step_begin`, `step_end` with `ops`, `done`),
    then the end of the process: the user's training never runs in ops mode."""
    step = -1
    try:
        torch.manual_seed(seed)
        dev = torch.device(device)
        for step in range(OPS_STEPS):
            events.emit("step_begin", run=0, step=step)
            events.emit("step_end", run=0, step=step, loss=ops_step(dev), ops=True)
    except Exception as exc:  # the device's failure is the check's answer
        events.emit("error", kind="exception", message=f"{type(exc).__name__}: {exc}", run=0, step=step,
                    phase="ops", backtrace=traceback.format_exc()[-8000:])
        events.emit("done", status="error")
        _exit(1)
    events.emit("done", status="passed")
    _exit(0)


def _exit(status: int) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
