"""One training under dbh: what `dbh_adapter.connect()` returns.

A Session puts together the parts of the worker's side of the protocol:

    ScenarioFacts (_scenario.py)  what the scenario asks: steps, seed, subset, checkpoints
    StepFrame     (_frame.py)     the events of the run, step by step (also the faults,
                                  monitors and memory figures it drives)
    PlainLoop     (_loop.py)      watch / steps / backward / optimizer_step
    dataset()     (_data.py)      the training dataset, its reads reported
    lightning_callbacks()         the Lightning callback (lightning.py)

Outside dbh it is inactive: every method passes its arguments through and
writes nothing, so the same script runs with and without dbh.
"""

from __future__ import annotations

import argparse

from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from ._config import flatten_config
from ._data import Names, ReportingDataset, Synthetic, restrict
from ._faults import FaultSet
from ._frame import LossScaler, StepFrame
from ._loop import GradScaler, PlainLoop
from ._monitors import Finding
from ._protocol import Link
from ._scenario import ScenarioFacts
from ._validation import validation_metrics

if TYPE_CHECKING:
    from lightning.pytorch.callbacks import Callback

VERSION = "0.1.0"

# What this adapter serves (docs/worker-protocol.md, "Capabilities"; the
# faults' `fault:<name>` come from FaultSet.SUPPORTED).
BASE_CAPABILITIES = ("loss_bits", "stop_after", "checkpoint", "resume", "subset", "monitors.finite",
                     "monitors.localise", "memory_budget", "validation", "ops", "monitors.silent",
                     "monitors.numerics", "fixed_batch", "numerics_states")
# Served when the training asks for them: its runs (Session.runs) and its
# own synthetic samples (Session.dataset(..., synthetic=make)).
IN_PROCESS_RUNS, SYNTHETIC_DATA = "in_process_runs", "synthetic_data"

B = TypeVar("B")
D = TypeVar("D")
M = TypeVar("M", bound=torch.nn.Module)


def capabilities() -> list[str]:
    """Every capability the adapter lists in `hello`."""
    return list(BASE_CAPABILITIES) + ["fault:" + name for name in FaultSet.SUPPORTED]


class Session:
    """A training connected to dbh (or not: `active` False).

    `rank` is the process's global rank in a distributed training (from the
    environment at connect(), from trainer.global_rank in the Lightning
    callback): only rank 0 writes events; every rank trains the same subset
    with the same faults and monitors.
    """

    def __init__(self, link: Link | None = None, framework: str = "pytorch", *, rank: int = 0) -> None:
        self.link = link
        self.facts: ScenarioFacts | None = None
        self.frame: StepFrame | None = None
        if link is not None:
            self.facts = ScenarioFacts(link.scenario, link.trial_dir)
            self.frame = StepFrame(link, self.facts, worker=f"dbh-adapter {VERSION}",
                                   capabilities=capabilities(), rank=rank)
            self.frame.framework = framework
        self._loop = PlainLoop(self.frame)

    # --- state ----------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether dbh started this process (the session writes events)."""
        return self.frame is not None

    @property
    def rank(self) -> int:
        return self.frame.rank if self.frame is not None else 0

    def report_config(self, config: Mapping[str, Any] | argparse.Namespace) -> None:
        """The training's own composed configuration, reported in `hello`
        (call before the model is seen): dbh's `scenario from-command
        --external` maps its keys into it."""
        if self.frame is not None:
            self.frame.config = flatten_config(vars(config) if isinstance(config, argparse.Namespace) else config)

    def report_validation(self, metrics: Mapping[str, Any]) -> None:
        """A validation's metrics, by the training's own names (`val/f1`,
        `val_iou`, …), as an `eval` event after the steps trained so far; dbh
        reads `hmean`, `precision` and `recall` from the ones named so (`f1` is
        an h-mean) and judges metrics that stay at zero. Non-finite values are
        left out. Outside dbh, nothing."""
        if self.frame is not None:
            self.frame.evaluation(validation_metrics(metrics))

    def set_rank(self, rank: int) -> None:
        """The process's global rank: events only from rank 0."""
        if self.frame is not None:
            self.frame.set_rank(rank)

    @property
    def framework(self) -> str:
        return self.frame.framework if self.frame is not None else "pytorch"

    @framework.setter
    def framework(self, value: str) -> None:
        if self.frame is not None:
            self.frame.framework = value

    @property
    def run(self) -> int:
        """The in-process run in progress (Session.runs), 0 outside dbh."""
        return self.frame.run if self.frame is not None else 0

    @property
    def step(self) -> int:
        """The step in progress (or the last one), -1 before the first."""
        return self.frame.step if self.frame is not None else -1

    @property
    def finished(self) -> bool:
        """Whether `done` was written."""
        return self.frame.finished if self.frame is not None else False

    @property
    def stop_requested(self) -> bool:
        """Whether the run reached train.stop_after (or train.max_steps)."""
        return self.frame.stop_requested if self.frame is not None else False

    @property
    def training(self) -> bool:
        return self.frame.training if self.frame is not None else False

    @training.setter
    def training(self, value: bool) -> None:
        if self.frame is not None:
            self.frame.training = value

    @property
    def scaler(self) -> GradScaler | None:
        """A plain loop's loss scaler (watch)."""
        return self._loop.scaler

    # --- facts from the scenario ------------------------------------------------------

    @property
    def max_steps(self) -> int | None:
        """train.max_steps; None outside dbh."""
        return self.facts.max_steps if self.facts is not None else None

    @property
    def last_step(self) -> int | None:
        """Steps this run trains: train.stop_after, else train.max_steps; None outside dbh."""
        return self.facts.last_step if self.facts is not None else None

    @property
    def seed(self) -> int | None:
        """train.seed; None outside dbh."""
        return self.facts.seed if self.facts is not None else None

    def resume_path(self) -> str | None:
        """The checkpoint dbh asks this run to resume from, or None."""
        return self.facts.resume_from if self.facts is not None else None

    def capabilities(self) -> list[str]:
        """What the adapter serves, as `hello` lists it (with what this
        training added: in_process_runs, synthetic_data)."""
        return list(self.frame.capabilities) if self.frame is not None else capabilities()

    def checkpoint_due(self, next_step: int) -> bool:
        """Whether to write the checkpoint to resume at `next_step` now
        (train.checkpoint_every); never on a rank other than 0."""
        return self.facts is not None and self.rank == 0 and self.facts.checkpoint_due(next_step)

    def checkpoint_path(self, next_step: int) -> str:
        """Where the checkpoint to resume at `next_step` goes: the trial folder,
        named as dbh's bisections look for it."""
        if self.facts is None:
            raise RuntimeError("checkpoint_path: the session is not connected to dbh (no trial folder)")
        return self.facts.checkpoint_path(next_step)

    # --- the training's parts ---------------------------------------------------------

    def runs(self) -> Iterator[int]:
        """The runs of this process: `for run in dbh.runs():` around building
        and fitting the model trains it repeat.in_process times in one process
        (`dbh repeat --in-process N`, the "second run" failures), each run
        between its `run_begin` and `run_end` with its memory, open files,
        threads and child processes; 0 alone outside dbh. Call it before the
        model is built, so that `hello` lists `in_process_runs`."""
        if self.frame is None or self.facts is None:
            yield 0
            return
        frame = self.frame
        if IN_PROCESS_RUNS not in frame.capabilities:
            frame.capabilities.append(IN_PROCESS_RUNS)
        frame.total_runs = self.facts.in_process
        for run in range(frame.total_runs):
            if run > 0:
                frame.next_run(run)
            yield run
            if frame.finished:
                return
            frame.done("passed")  # this run's run_end (and after the last, done)

    def dataset(self, dataset: torch.utils.data.Dataset[D], names: Names | None = None,
                synthetic: Synthetic | None = None) -> torch.utils.data.Dataset[D]:
        """The training dataset as dbh asks for it: each read reported
        (`sample_read`, with the user's index and, with `names`, the sample's
        name: `names[i]` or `names(i)`), restricted to data.subset when dbh
        asks for it (indices of this dataset, the ones its __getitem__
        takes). `synthetic(i)` makes an easy synthetic sample of the same
        structure: given before the model is seen, `hello` lists
        `synthetic_data`, and under a synthetic data.source every read is made
        by it (Note [A training's own synthetic samples], _data.py). Outside
        dbh the dataset itself."""
        if self.frame is None or self.facts is None:
            return dataset
        frame = self.frame
        if synthetic is not None and not frame.said_hello and SYNTHETIC_DATA not in frame.capabilities:
            frame.capabilities.append(SYNTHETIC_DATA)
        made = synthetic if synthetic is not None and self.facts.data_source != "real" else None
        wrapped = ReportingDataset(dataset, frame.samples, names, synthetic=made)
        out = restrict(wrapped, self.facts.subset)
        self.frame.announce_dataset(len(wrapped))
        return out

    def lightning_callbacks(self) -> list[Callback]:
        """The callbacks to pass to lightning.Trainer: [] outside dbh."""
        if self.frame is None:
            return []
        from .lightning import DbhCallback
        self.framework = "lightning"
        return [DbhCallback(self)]

    # --- a plain PyTorch loop (_loop.py) ------------------------------------------------

    def watch(self, model: M, optimizer: torch.optim.Optimizer | None = None, device: str = "cpu",
              scaler: GradScaler | None = None) -> M:
        """Plain loops: call once the model is built (writes `hello`). With a
        loss scaler (torch.amp.GradScaler, fp16) `backward` scales the loss and
        `optimizer_step` unscales, steps and updates it, as PyTorch's AMP
        recipe does; a step it skips is judged as Note [Loss-scaler skips]."""
        return self._loop.watch(model, optimizer, device=device, scaler=scaler)

    def steps(self, batches: Iterable[B], max_steps: int | None = None, start: int = 0) -> Iterator[tuple[int, B]]:
        """Plain loops: yields (step, batch) from `batches` (an iterable, cycled)
        for `max_steps` steps, each one optimizer step. Under dbh the run stops
        at train.stop_after when dbh asks, and a `max_steps` other than the
        scenario's train.max_steps raises KeyNotApplied."""
        return self._loop.steps(batches, max_steps=max_steps, start=start)

    def backward(self, loss: torch.Tensor) -> None:
        """Plain loops: checks and records the loss, then loss.backward() and
        the gradient faults."""
        self._loop.backward(loss)

    def optimizer_step(self, optimizer: torch.optim.Optimizer | None = None, samples: int = 0) -> None:
        """Plain loops: the step's checks, optimizer.step(), zero_grad, step_end."""
        self._loop.optimizer_step(optimizer, samples=samples)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """`done` (passed), or the exception's `error` and `done`; the
        exception propagates."""
        if exc is not None:
            self.exception(exc)
        else:
            self.done("passed")

    # --- the step frame, for a loop of one's own ---------------------------------------
    # Each call is StepFrame's of the same name (_frame.py, in the order its docstring
    # gives); outside dbh it does nothing.

    def hello(self, model: torch.nn.Module, device: str = "cpu", framework_version: str = "") -> None:
        if self.frame is not None:
            self.frame.hello(model, device=device, framework_version=framework_version)

    def harness_error(self, message: str) -> None:
        if self.frame is not None:
            self.frame.harness_error(message)

    def begin_step(self, step: int, batch: Any) -> None:
        if self.frame is not None:
            self.frame.begin_step(step, batch)

    def micro_batch(self, batch: Any) -> None:
        if self.frame is not None:
            self.frame.micro_batch(batch)

    def loss(self, loss: torch.Tensor) -> None:
        if self.frame is not None:
            self.frame.loss(loss)

    def record_loss(self, loss: torch.Tensor | float | None) -> None:
        if self.frame is not None:
            self.frame.record_loss(loss)

    def after_backward(self, model: torch.nn.Module) -> None:
        if self.frame is not None:
            self.frame.after_backward(model)

    def before_optimizer_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                              scaler: LossScaler | None = None) -> None:
        if self.frame is not None:
            self.frame.before_optimizer_step(model, optimizer, scaler if scaler is not None else self.scaler)

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer | None) -> None:
        if self.frame is not None:
            self.frame.after_optimizer_step(optimizer)

    def end_step(self, lr: float = 0.0, samples: int = 0) -> None:
        if self.frame is not None:
            self.frame.end_step(lr=lr, samples=samples)

    def checkpoint_written(self, next_step: int, path: str, resumed: bool = False) -> None:
        if self.frame is not None:
            self.frame.checkpoint_written(next_step, path, resumed=resumed)

    def diverged(self, finding: Finding) -> None:
        if self.frame is not None:
            self.frame.diverged(finding)

    def exception(self, exc: BaseException, phase: str = "train") -> None:
        if self.frame is not None:
            self.frame.exception(exc, phase=phase)

    def done(self, status: str = "passed") -> None:
        if self.frame is not None:
            self.frame.done(status)
