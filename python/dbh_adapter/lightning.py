"""The worker protocol from a Lightning training: one callback.

    trainer = L.Trainer(..., callbacks=[*dbh.lightning_callbacks()])
    trainer.fit(module, datamodule=dm, ckpt_path=dbh.resume_path())

dbh's step is Lightning's optimizer step (`trainer.global_step`); with
`accumulate_grad_batches` > 1 a step spans that many batches. Checkpoints
are Lightning's own (`trainer.save_checkpoint`), written into the trial
folder; dbh resumes from them through `ckpt_path`. Under a distributed
strategy every rank runs the callback and only global rank 0 writes events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ._errors import KeyNotApplied, NotSupported
from ._frame import LossScaler, StepFrame
from ._monitors import Finding
from ._protocol import multi_rank_message
from ._validation import validation_metrics

if TYPE_CHECKING:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import Callback

    from ._session import Session

    _VERSION = ""
else:
    try:
        import lightning as _lightning
        from lightning.pytorch.callbacks import Callback
    except ImportError:  # the standalone package
        import pytorch_lightning as _lightning
        from pytorch_lightning.callbacks import Callback
    _VERSION = getattr(_lightning, "__version__", "")

# trainer.precision's spellings of dbh's train.precision, the one dbh passes first: dbh's table
# (lightning_precisions() in harness/scenario/aliases.cc) rendered; a C++ unit test keeps them equal.
_PRECISION = {"fp32": ("32-true", "32"), "fp16": ("16-mixed", "16"), "bf16": ("bf16-mixed", "bf16")}


class DbhCallback(Callback):
    """Connects a Lightning Trainer to dbh through `session` (an active one:
    Session.lightning_callbacks makes it)."""

    def __init__(self, session: Session) -> None:
        super().__init__()
        if session.frame is None:
            raise ValueError("DbhCallback: expected a session connected to dbh, got an inactive one "
                             "(use session.lightning_callbacks(), which is [] outside dbh)")
        self.session = session
        self.frame: StepFrame = session.frame
        self._seen_step = -1

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            if trainer.world_size > 1:
                # One trial is one training process (NotSupported): rank 0
                # says so to dbh; the ranks it launched raise at connect().
                message = multi_rank_message(trainer.world_size, trainer.global_rank)
                if trainer.global_rank == 0:
                    self.frame.harness_error(message)
                raise NotSupported(message)
            self.frame.set_rank(trainer.global_rank)
            self.frame.hello(pl_module, device=self.frame.facts.device, framework_version=_VERSION)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        f = self.frame
        facts = f.facts
        # The keys dbh passes (worker.keys) must have reached the configuration:
        # a run that trains something else would answer another question.
        f.check_key("train.max_steps", facts.max_steps, trainer.max_steps, "trainer.max_steps")
        f.check_key("train.accumulation", facts.accumulation, trainer.accumulate_grad_batches,
                    "trainer.accumulate_grad_batches")
        batch_size = getattr(trainer.train_dataloader, "batch_size", None)
        if batch_size is not None:
            f.check_key("data.batch_size", facts.batch_size, batch_size, "the train dataloader's batch_size")
        precision = facts.precision
        if str(trainer.precision) not in _PRECISION.get(precision, ()):
            f.check_key("train.precision", precision, str(trainer.precision), "trainer.precision")
        f.training = True
        resume = facts.resume_from
        if resume:
            f.checkpoint_written(trainer.global_step, resume, resumed=True)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        f = self.frame
        step = trainer.global_step
        if f.stop_requested:
            return  # should_stop, set after the last step, ends the fit
        if step != self._seen_step:
            self._seen_step = step
            f.begin_step(step, batch)
        else:
            f.micro_batch(batch)

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        self.frame.loss(loss)

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Gradient faults where a real fault would be: in the gradients the
        # loss scaler (fp16) then unscales and checks, so that it skips the
        # step as it would skip a real overflow. With accumulation this runs
        # for each micro-batch; a NaN stays NaN.
        self.frame.after_backward(pl_module)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        # Lightning's AMP plugin has unscaled the gradients by now; its scaler
        # (fp16) skips the step if they are not finite (Note [Loss-scaler skips]).
        self.frame.before_optimizer_step(pl_module, optimizer, scaler=_scaler(trainer))

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        f = self.frame
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        f.record_loss(loss if isinstance(loss, (torch.Tensor, float, int)) else None)
        if trainer.global_step == self._seen_step:
            return  # a micro-batch: the step goes on
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        f.after_optimizer_step(optimizer)
        lr = float(optimizer.param_groups[0]["lr"]) if optimizer is not None else 0.0
        samples = _batch_len(batch) * int(trainer.accumulate_grad_batches)
        f.end_step(lr=lr, samples=samples)
        next_step = trainer.global_step
        # Every rank calls save_checkpoint: Lightning's save is collective
        # (the strategy writes from global rank 0 and waits for all ranks at
        # a barrier), so no other rank writes into the trial folder; the
        # `checkpoint` event is rank 0's.
        if f.facts.checkpoint_due(next_step):
            path = f.facts.checkpoint_path(next_step)
            trainer.save_checkpoint(path)
            f.checkpoint_written(next_step, path)
        if f.stop_requested:
            trainer.should_stop = True

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The metrics the module logged in its validation (`val/…`, or named
        # as h-mean, precision, recall), as an `eval` event; never the
        # sanity check's, which follows no training.
        if not trainer.sanity_checking:
            self.frame.evaluation(validation_metrics(trainer.callback_metrics, prefixed_only=True))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.frame.done("passed")

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # A KeyNotApplied was written (error, done) when it was raised:
        # `exception` writes nothing once the run is done.
        self.frame.exception(exception)


def _scaler(trainer: pl.Trainer) -> LossScaler | None:
    """The precision plugin's torch.amp.GradScaler ("16-mixed"), or None."""
    scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
    return scaler if scaler is not None and hasattr(scaler, "get_scale") else None


def _batch_len(batch: Any) -> int:
    """The batch's number of samples: the first dimension of its first tensor
    (or the length of its first list)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    if isinstance(batch, dict):
        for v in batch.values():
            if isinstance(v, torch.Tensor):
                return int(v.shape[0])
            if isinstance(v, (list, tuple)):
                return len(v)
    if isinstance(batch, (list, tuple)) and batch:
        return _batch_len(batch[0])
    return 0


__all__ = ["DbhCallback", "Finding", "KeyNotApplied"]
