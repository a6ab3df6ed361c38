"""A plain PyTorch loop's four calls (no Lightning):

    with dbh_adapter.connect() as dbh:
        dbh.watch(model, optimizer)                      # hello
        for step, batch in dbh.steps(loader, max_steps=N):  # step_begin, faults on the batch
            dbh.backward(loss_of(model, batch))          # checks, loss.backward(), gradient faults
            dbh.optimizer_step()                         # checks, step, zero_grad, step_end

Outside dbh (no frame) they do what the loop would do without them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol, TypeVar

import torch

from ._frame import LossScaler, StepFrame

B = TypeVar("B")
M = TypeVar("M", bound=torch.nn.Module)


class GradScaler(LossScaler, Protocol):
    """The fp16 loss scaler's calls a plain loop makes (torch.amp.GradScaler)."""

    def scale(self, outputs: torch.Tensor) -> torch.Tensor: ...

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None: ...

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any: ...

    def update(self, new_scale: Any = None) -> None: ...


class PlainLoop:
    """The plain-loop helpers of a Session: the step frame's calls in a
    PyTorch loop's order, with the loss scaler's AMP recipe."""

    def __init__(self, frame: StepFrame | None) -> None:
        self.frame = frame
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.scaler: GradScaler | None = None

    def watch(self, model: M, optimizer: torch.optim.Optimizer | None = None, device: str = "cpu",
              scaler: GradScaler | None = None) -> M:
        """Call once the model is built (writes `hello`). With a loss scaler
        (torch.amp.GradScaler, fp16) `backward` scales the loss and
        `optimizer_step` unscales, steps and updates it, as PyTorch's AMP
        recipe does; a step it skips is judged as Note [Loss-scaler skips]."""
        self.model = model
        self.optimizer = optimizer
        self.scaler = scaler
        if self.frame is not None:
            self.frame.hello(model, device=device)
        return model

    def steps(self, batches: Iterable[B], max_steps: int | None = None, start: int = 0) -> Iterator[tuple[int, B]]:
        """Yields (step, batch) from `batches` (an iterable, cycled) for
        `max_steps` steps, each one optimizer step. Under dbh the run stops at
        train.stop_after when dbh asks, and a `max_steps` other than the
        scenario's train.max_steps raises KeyNotApplied (after its `error` and
        `done`): the key did not reach the script."""
        frame = self.frame
        step = start
        last = max_steps
        if frame is not None:
            frame.training = True
            if max_steps is not None:
                frame.check_key("train.max_steps", frame.facts.max_steps, int(max_steps),
                                "the max_steps it passes to steps()")
            last = frame.facts.last_step
        while last is None or step < last:
            produced = False
            for batch in batches:
                produced = True
                if last is not None and step >= last:
                    return
                if frame is not None:
                    frame.begin_step(step, batch)
                yield step, batch
                step += 1
            if not produced or last is None:
                return

    def backward(self, loss: torch.Tensor) -> None:
        """Checks and records the loss, then loss.backward() (scaled with a
        loss scaler) and the gradient faults."""
        frame = self.frame
        if frame is not None:
            frame.loss(loss)
            frame.record_loss(loss)
        scaled = self.scaler.scale(loss) if self.scaler is not None else loss
        scaled.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        if frame is not None and self.model is not None:
            frame.after_backward(self.model)

    def optimizer_step(self, optimizer: torch.optim.Optimizer | None = None, samples: int = 0) -> None:
        """The step's checks (raises Finding), optimizer.step() (through the
        loss scaler, which skips a step whose gradients overflow),
        zero_grad and `step_end`. `samples`: how many the step trained on."""
        opt = optimizer or self.optimizer
        if opt is None:
            raise ValueError("optimizer_step: expected an optimizer (pass it to watch() or here), got None")
        frame = self.frame
        if self.scaler is not None:
            self.scaler.unscale_(opt)
        if frame is not None and self.model is not None:
            frame.before_optimizer_step(self.model, opt, scaler=self.scaler)
        if self.scaler is not None:
            self.scaler.step(opt)  # skipped when the unscaled gradients are not finite
            self.scaler.update()
        else:
            opt.step()
        if frame is not None:
            frame.after_optimizer_step(opt)
        opt.zero_grad(set_to_none=True)
        if frame is not None:
            frame.end_step(lr=float(opt.param_groups[0]["lr"]), samples=samples)
