"""The step frame: one run's events in the order docs/events.md gives them.

    hello(model)             -> hello (with the environment; describe mode: done, exit 0), memory_budget,
                                dataset, run_begin; faults and monitors attached
    begin_step(step, batch)  -> step_begin, batch, faults on the batch
    micro_batch(batch)       -> a later micro-batch of the step (accumulation)
    loss(loss)               -> the micro-batch's loss checked
    record_loss(loss)        -> its value and bits for step_end
    after_backward(model)    -> gradient faults
    before_optimizer_step    -> the step's one read: its finding (or the loss
                                scaler's skip) and gradient norm; lr faults
    after_optimizer_step     -> lr faults undone
    end_step(lr, samples)    -> step_end; stop after train.stop_after
    diverged / exception / harness_error -> health, error, done
    done(status)             -> run_end (passed: steps, checksum, memory, resources), done

The Lightning callback (lightning.py) and the plain-loop helpers (_loop.py)
call these through the Session; a custom loop may call them in this order.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import traceback
from types import TracebackType
from typing import Any, Protocol

import torch

from ._bits import checksum, float_bits
from ._data import SampleReporter, failed_sample
from ._environment import environment, resources
from ._errors import KeyNotApplied
from ._events import EventWriter, fit_in_line
from ._faults import FaultSet, input_tensor
from ._fixed import FirstBatch
from ._memory import apply_memory_budget, memory_figures, release_free_memory
from ._ops import run_ops_check
from ._parser import command_line_report
from ._numerics import NumericsWatch
from ._states import StepStates
from ._silent import PredictionWatch, SilentFinding, TargetWatch
from ._validation import eval_fields
from ._monitors import Finding, FiniteMonitor
from ._protocol import EVENT_SCHEMA_VERSION, SCALER_SKIP_LIMIT, Link
from ._scenario import ScenarioFacts


class LossScaler(Protocol):
    """What the frame reads of an fp16 loss scaler (torch.amp.GradScaler)."""

    def is_enabled(self) -> bool: ...

    def get_scale(self) -> float: ...


class StepFrame:
    """The events of one run of a training connected to dbh.

    `rank` is the process's global rank in a distributed training: every rank
    trains, applies the faults and raises the monitors' findings alike, but
    only rank 0 writes events (one stream per trial).
    """

    def __init__(self, link: Link, facts: ScenarioFacts, *, worker: str, capabilities: list[str],
                 rank: int = 0) -> None:
        self.link = link
        self.facts = facts
        self.worker = worker  # "dbh-adapter <version>"
        self.capabilities = capabilities
        self.framework = "pytorch"
        self.config: dict[str, Any] = {}  # the training's own configuration, flattened (`hello`'s `config`)
        self.events = EventWriter(link.fd, muted=rank != 0)
        self.rank = rank
        self.samples = SampleReporter(self.events)
        self.faults = FaultSet(facts.faults, self.events.emit)
        self.first_batch = FirstBatch(facts.fixed_batch)
        self.monitor = FiniteMonitor(facts.monitor_mode)
        self.numerics = NumericsWatch(facts.numerics, facts.numerics_jitter, link.trial)
        self.states = StepStates(facts.numerics_save_states, facts.numerics_replay, facts.trial_dir)
        self.predictions = PredictionWatch(facts.silent_check("predictions"),
                                           int(facts.monitor_number("collapse_after")),
                                           int(facts.monitor_number("collapse_steps")),
                                           facts.monitor_number("collapse_margin"))
        self.targets = TargetWatch(facts.silent_check("labels"), int(facts.monitor_number("collapse_steps")))
        self.step = -1
        self.run = 0  # the in-process run (repeat.in_process, Session.runs)
        self.total_runs = 1
        self._run_over = False  # this run's run_end is written; the next has not begun
        self._run_pending = False  # the next run began (Session.runs); its run_begin waits for the model
        self.said_hello = False
        self.finished = False
        self.stop_requested = False
        self.training = False  # the step loop began: errors from here on have a step
        self._pending: list[tuple[str, dict[str, Any]]] = []  # events that wait for hello
        self._model: torch.nn.Module | None = None
        self._step_open = False
        self._t0 = 0.0
        self._micro_bits: list[int] = []
        self._last_loss: float | None = None
        self._grad_norm: float | None = None
        self._skip_streak = 0
        self._streak_first: Finding | None = None  # the first skipped step's finding
        self._skipped = False
        self._loss_scale = 1.0

    def set_rank(self, rank: int) -> None:
        """The global rank (Lightning's trainer.global_rank): events only from 0."""
        self.rank = rank
        self.events.muted = rank != 0

    # --- the run's start ------------------------------------------------------

    def hello(self, model: torch.nn.Module, device: str = "cpu", framework_version: str = "") -> None:
        """The first event: who trains, what it serves, its modules. In
        describe mode the process ends here with status 0, on every rank (dbh
        only asked what the worker serves)."""
        if self.said_hello:
            if self._run_pending:
                self._begin_run(model)
            return
        self.said_hello = True
        self._model = model
        ev = self.events
        framework = self.framework + (" " + framework_version if framework_version else "")
        parsed = command_line_report()
        fields: dict[str, Any] = dict(
            schema_version=EVENT_SCHEMA_VERSION, pid=os.getpid(), seed=self.facts.seed,
            scenario_hash=self.link.scenario_hash, scenario=self.facts.name, trial=self.link.trial, git="",
            dbh_version="", torch_version=torch.__version__, device=str(device), threads=torch.get_num_threads(),
            worker=f"{self.worker} ({framework}, torch {torch.__version__})", capabilities=self.capabilities,
            modules=[n for n, _ in model.named_modules() if n],
            environment=environment(str(device), framework_version if self.framework == "lightning" else ""))
        config, options = fit_in_line(fields, {**parsed.get("config", {}), **self.config}, parsed.get("options"))
        ev.emit("hello", **fields, config=config or None, options=options)
        if self.link.describe:
            ev.emit("done", status="described")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        if self.facts.train_mode == "ops":
            run_ops_check(ev, self.facts.device, self.facts.seed)  # ends the process
        budget = self.facts.memory_budget
        if budget > 0:
            ev.emit("memory_budget", **apply_memory_budget(self.facts.device, budget))
        for type_, fields in self._pending:
            ev.emit(type_, **fields)
        self._pending.clear()
        self._begin_run(model)

    def _begin_run(self, model: torch.nn.Module) -> None:
        """`run_begin` of the run in progress, faults and monitors on its model."""
        self._run_pending = False
        self._model = model
        self.faults.attach(model)
        self.numerics.attach(model)  # after the faults: it measures the outputs they changed
        self.monitor.attach(model, always=self.faults.modules())
        self.predictions.attach(model)
        self.targets.begin_run()
        self.events.emit("run_begin", run=self.run, memory=memory_figures())
        self.samples.on = True

    def next_run(self, run: int) -> None:
        """Run `run` of repeat.in_process begins: the step state starts again;
        its `run_begin` is written when its model is seen (hello again)."""
        self.run = run
        self.faults.set_run(run)
        self.step = -1
        self.stop_requested = False
        self.training = False
        self._run_over = False
        self._run_pending = True
        self._step_open = False
        self._micro_bits = []
        self._last_loss = None
        self._grad_norm = None
        self._skip_streak = 0
        self._streak_first = None
        self._skipped = False

    def evaluation(self, metrics: dict[str, float]) -> None:
        """One validation's metrics (`eval`), after the steps trained so far."""
        if self.finished or not metrics:
            return
        steps = self.step if self._step_open else self.step + 1
        self.events.emit("eval", run=self.run, step=max(0, steps), **eval_fields(metrics))

    def announce_dataset(self, size: int) -> None:
        """The training dataset's size (`dataset`): after `hello`, before
        `run_begin` when the dataset is wrapped before the model is seen."""
        if self.finished:
            return
        if self.said_hello:
            self.events.emit("dataset", size=size)
        else:
            self._pending.append(("dataset", {"size": size}))

    def harness_error(self, message: str) -> None:
        """The command does not train what the scenario says (a key that did
        not reach its configuration): the trial is unresolved, not a failure."""
        if self.finished:
            return
        self.events.emit("error", kind="harness", message=message)
        self.done("error")

    def check_key(self, key: str, want: object, got: object, where: str) -> None:
        """Raises KeyNotApplied, after its `error` (kind harness) and `done`,
        when the training's `got` (at `where`) is not the scenario's `want`."""
        if want != got:
            error = KeyNotApplied(key, want, got, where)
            self.harness_error(str(error))
            raise error

    # --- a step -----------------------------------------------------------------

    def begin_step(self, step: int, batch: Any) -> None:
        if self._run_pending and self._model is not None:
            self._begin_run(self._model)  # the same model trained again
        self.step = step
        self._step_open = True
        self._t0 = time.monotonic()
        self._micro_bits = []
        self._grad_norm = None
        ev = self.events
        ev.emit("step_begin", run=self.run, step=step)
        if self.states.on and self._model is not None:
            problem = self.states.at_step(self._model, step, self.run, self.rank)
            if problem:
                self.harness_error(problem)
                raise RuntimeError(problem)
        ids = self._fixed(batch)
        if ids:
            ev.emit("batch", run=self.run, step=step, samples=ids)
        self.monitor.begin_step(step)
        self.numerics.begin_step()
        self.predictions.batch(batch)
        self.targets.batch(batch)
        self.faults.on_step_begin(step, batch, run=self.run)
        self.monitor.check_batch(batch, input_tensor(batch))

    def micro_batch(self, batch: Any) -> None:
        """A later micro-batch of the same step (gradient accumulation)."""
        self._fixed(batch)
        self.faults.on_step_begin(self.step, batch, run=self.run)
        self.monitor.check_batch(batch, input_tensor(batch))

    def _fixed(self, batch: Any) -> list[str]:
        """data.fixed_batch: `batch` made the first batch, in place (Note [The
        first batch, repeated]); its sample ids (the first batch's when on).
        Raises RuntimeError, after its `error` (kind harness) and `done`, for
        a batch that cannot be made the first."""
        ids = _sample_ids(batch)
        problem = self.first_batch.apply(batch, ids)
        if problem:
            self.harness_error(problem)
            raise RuntimeError(problem)
        return self.first_batch.ids if self.first_batch.on else ids

    def loss(self, loss: torch.Tensor) -> None:
        """The micro-batch's loss, checked (localise mode raises Finding here)."""
        self.monitor.check_loss(loss)

    def record_loss(self, loss: torch.Tensor | float | None) -> None:
        """The micro-batch's loss as the user's code computed it (unscaled)."""
        if loss is None:
            return
        self._last_loss = float(loss.detach().float().cpu()) if isinstance(loss, torch.Tensor) else float(loss)
        self._micro_bits.append(float_bits(self._last_loss))

    def after_backward(self, model: torch.nn.Module) -> None:
        self.faults.after_backward(model)

    def before_optimizer_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                              scaler: LossScaler | None = None) -> None:
        """The step's finite checks and gradient norm (one read), on gradients
        the loss scaler (if any) has unscaled; raises Finding. With an fp16
        loss scaler, gradients that overflow are the scaler's skipped step,
        not a finding, until SCALER_SKIP_LIMIT steps in a row."""
        scaling = scaler is not None and scaler.is_enabled()
        self._loss_scale = float(scaler.get_scale()) if scaler is not None and scaling else 1.0
        self._skipped = False
        self.monitor.check_gradients(model)
        self.numerics.gradients()
        reading = self.monitor.read()
        self._grad_norm = reading.grad_norm
        finding = reading.finding
        if finding is None:
            self._skip_streak = 0
        else:
            finding.sites = self.monitor.sites()
            if not scaling or set(finding.sites) != {"gradient"}:
                raise finding
            self._scaler_skip(finding)
        self.faults.before_optimizer_step(optimizer)

    def _scaler_skip(self, finding: Finding) -> None:
        """Note [Loss-scaler skips]: a step the loss scaler skips, its `health`
        event (check loss_scaler, not primary); at the limit the streak's first
        step is the finding."""
        if self._skip_streak == 0:
            self._streak_first = finding
        self._skip_streak += 1
        self._skipped = True
        self.events.emit("health", run=self.run, step=finding.step, check="loss_scaler", kind="gradient",
                         site=finding.site, module=finding.module or None, primary=False,
                         skipped_in_a_row=self._skip_streak, limit=SCALER_SKIP_LIMIT)
        if self._skip_streak < SCALER_SKIP_LIMIT:
            return
        first = self._streak_first or finding
        raise Finding("gradient", first.site, first.module, first.step, sites=finding.sites,
                      message=f"non-finite gradient in {first.site} from step {first.step}: the loss scaler "
                              f"skipped {self._skip_streak} steps in a row (the gradients stay non-finite at "
                              f"every scale)", extra={"loss_scaler_skips": self._skip_streak})

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer | None) -> None:
        self.faults.after_optimizer_step(optimizer)

    def end_step(self, lr: float = 0.0, samples: int = 0) -> None:
        """`step_end`. `grad_norm` and `grad_norm_bits` only when the monitors
        measured them; the loss's parts (bce, l1, dice) are never sent: the
        user's loss need not have them."""
        if not self._step_open:
            return
        self._step_open = False
        loss = self._last_loss if self._last_loss is not None else float("nan")
        norm = self._grad_norm
        self.events.emit("step_end", run=self.run, step=self.step, loss=loss,
                         loss_bits=self._micro_bits[-1] if self._micro_bits else float_bits(loss),
                         micro_loss_bits=list(self._micro_bits), lr=float(lr), grad_norm=norm,
                         grad_norm_bits=float_bits(norm) if norm is not None else None,
                         skipped=self._skipped, loss_scale=self._loss_scale,
                         seconds=round(time.monotonic() - self._t0, 6), samples=int(samples),
                         memory=memory_figures(), numerics=self.numerics.read())
        if self.step + 1 >= self.facts.last_step:
            self.stop_requested = True
        self.targets.judge(self.step)  # raises SilentFinding: the training stops there
        self.predictions.judge(self.step)

    def checkpoint_written(self, next_step: int, path: str, resumed: bool = False) -> None:
        """`checkpoint`: one written to resume at `next_step`, or (`resumed`)
        the one this run continued from."""
        self.events.emit("checkpoint", run=self.run, step=next_step, path=path, resumed=True if resumed else None)

    # --- the run's end ----------------------------------------------------------

    def diverged(self, finding: Finding) -> None:
        """The monitors' finding: the primary `health` event, the error, done."""
        if self.finished:
            return
        ev = self.events
        ev.emit("health", run=self.run, step=finding.step, check="finite", kind=finding.kind, site=finding.site,
                module=finding.module or None, mode=self.monitor.mode, primary=True, stats=finding.stats,
                input_module=finding.input_module, input_stats=finding.input_stats,
                nonfinite_sites=finding.sites, **finding.extra)
        ev.emit("error", kind="diverged", message=str(finding), run=self.run, step=finding.step,
                module=finding.module or None, phase="train")
        self.done("diverged")

    def silent(self, finding: SilentFinding) -> None:
        """A silent failure the adapter found: the primary `health`, the
        error (kind silent), done `failed`."""
        if self.finished:
            return
        ev = self.events
        ev.emit("health", run=self.run, step=finding.step, check=finding.check, kind=finding.kind, site=finding.site,
                mode=self.monitor.mode, primary=True, message=str(finding), evidence=finding.evidence,
                **finding.extra)
        ev.emit("error", kind="silent", message=str(finding), run=self.run, step=finding.step, phase="train")
        self.done("failed")

    def exception(self, exc: BaseException, phase: str = "train") -> None:
        """What stopped the run: a Finding (diverged), a KeyNotApplied
        (harness; already written when the adapter raised it), or any other
        exception: its `error` event (kind data for a dataset's read, with
        `sample` when the index is known; else exception), then done."""
        if self.finished:
            return
        if isinstance(exc, SilentFinding):
            self.silent(exc)
            return
        if isinstance(exc, Finding):
            self.diverged(exc)
            return
        if isinstance(exc, KeyNotApplied):
            self.harness_error(str(exc))
            return
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        sample = failed_sample(exc)
        kind = "data" if sample is not None or _from_data(exc) else "exception"
        # The step in progress, or the one about to begin: an error while
        # fetching its batch (Lightning fetches one batch ahead) belongs to it.
        step = (self.step if self._step_open else self.step + 1) if self.training else None
        self.events.emit("error", kind=kind, message=f"{type(exc).__name__}: {exc}", run=self.run, step=step,
                         phase="data" if kind == "data" else phase, backtrace=text[-8000:],
                         module=self.monitor.last_module or None, sample=sample, memory=memory_figures())
        self.done("error")

    def done(self, status: str = "passed") -> None:
        """The last event (`run_end` first when the run passed); once. A run
        of repeat.in_process that passed before the last one ends with its
        `run_end` alone: the next run follows in this process."""
        if self.finished or (status == "passed" and self._run_over):
            return
        ev = self.events
        if status == "passed":
            # Note [What a run leaves behind]: the memory and what else the
            # run leaves open, measured after a garbage collection and with
            # the heap's free memory given back, so that only what is still
            # referenced counts.
            gc.collect()
            release_free_memory()
            ev.emit("run_end", run=self.run, steps=self.step + 1, checksum=checksum(self._model),
                    memory=memory_figures(), resources=resources() or None)
            if self.run + 1 < self.total_runs:
                self._run_over = True
                self.samples.on = False
                return
        self.finished = True
        self.samples.on = False
        ev.emit("done", status=status, memory=memory_figures())


def _sample_ids(batch: Any) -> list[str]:
    """The batch's sample ids: a dict's `id` (or ids, name, names, file, files)
    when it is a list of strings."""
    if isinstance(batch, dict):
        for key in ("id", "ids", "name", "names", "file", "files"):
            ids = batch.get(key)
            if isinstance(ids, (list, tuple)) and all(isinstance(i, str) for i in ids):
                return list(ids)
    return []


def _from_data(exc: BaseException) -> bool:
    """Whether the exception came from reading data: raised in a dataset's
    __getitem__ (or __getitems__), or re-raised by the DataLoader from one of
    its worker processes (torch's ExceptionWrapper.reraise)."""
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name in ("__getitem__", "__getitems__"):
            return True
        if code.co_name == "reraise" and code.co_filename.replace(os.sep, "/").endswith("torch/_utils.py"):
            return True
        tb = tb.tb_next
    return False
