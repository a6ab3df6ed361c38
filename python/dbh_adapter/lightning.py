"""The worker protocol from a Lightning training: one callback.

    trainer = L.Trainer(..., callbacks=[*dbh.lightning_callbacks()])
    trainer.fit(module, datamodule=dm, ckpt_path=dbh.resume_path())

dbh's step is Lightning's optimizer step (`trainer.global_step`); with
`accumulate_grad_batches` > 1 a step spans that many batches. Checkpoints
are Lightning's own (`trainer.save_checkpoint`), written into the trial
folder; dbh resumes from them through `ckpt_path`.
"""

try:
    import lightning as L
    from lightning.pytorch.callbacks import Callback
    _VERSION = getattr(L, "__version__", "")
except ImportError:  # the standalone package
    import pytorch_lightning as L  # noqa: N812
    from pytorch_lightning.callbacks import Callback
    _VERSION = getattr(L, "__version__", "")

from ._monitors import Finding

_PRECISION = {"fp32": ("32-true", "32"), "fp16": ("16-mixed", "16"), "bf16": ("bf16-mixed", "bf16")}


class DbhCallback(Callback):
    """Connects a Lightning Trainer to dbh through `session`."""

    def __init__(self, session):
        super().__init__()
        self.session = session
        self._seen_step = -1

    def setup(self, trainer, pl_module, stage):
        if stage == "fit":
            self.session.hello(pl_module, device=self.session.link.section("hardware").get("device", "cpu"),
                               framework_version=_VERSION)

    def on_train_start(self, trainer, pl_module):
        s = self.session
        # The keys dbh passes (worker.keys) must have reached the configuration:
        # a run that trains something else would answer another question.
        checks = [
            ("train.max_steps", s.max_steps, trainer.max_steps, "trainer.max_steps"),
            ("train.accumulation", int(s.train.get("accumulation", 1)), trainer.accumulate_grad_batches,
             "trainer.accumulate_grad_batches"),
        ]
        loader = trainer.train_dataloader
        batch_size = getattr(loader, "batch_size", None)
        if batch_size is not None:
            checks.append(("data.batch_size", int(s.data.get("batch_size", 0)), batch_size, "the train dataloader's batch_size"))
        precision = s.train.get("precision", "fp32")
        if str(trainer.precision) not in _PRECISION.get(precision, ()):
            checks.append(("train.precision", precision, str(trainer.precision), "trainer.precision"))
        for key, want, got, where in checks:
            if want != got:
                s.harness_error(f"{key} is {want} in the scenario but the command trains with {where} = {got}: "
                                f"the key did not reach its configuration (worker.keys maps dbh keys to yours)")
                trainer.should_stop = True
                raise SystemExit(3)
        s.training = True
        resume = s.resume_path()
        if resume:
            s.checkpoint_written(trainer.global_step, resume, resumed=True)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        s = self.session
        step = trainer.global_step
        if s.stop_requested:
            return  # should_stop, set after the last step, ends the fit
        if step != self._seen_step:
            self._seen_step = step
            s.begin_step(step, batch)
        else:
            s.micro_batch(batch)

    def on_before_backward(self, trainer, pl_module, loss):
        self.session.loss(loss)

    def on_after_backward(self, trainer, pl_module):
        # Gradient faults where a real fault would be: in the gradients the
        # loss scaler (fp16) then unscales and checks, so that it skips the
        # step as it would skip a real overflow. With accumulation this runs
        # for each micro-batch; a NaN stays NaN.
        self.session.after_backward(pl_module)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        # Lightning's AMP plugin has unscaled the gradients by now; its scaler
        # (fp16) skips the step if they are not finite (Note [Loss-scaler skips]).
        self.session.before_optimizer_step(pl_module, optimizer, scaler=_scaler(trainer))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        s = self.session
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        s.record_loss(loss)
        if trainer.global_step == self._seen_step:
            return  # a micro-batch: the step goes on
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        s.after_optimizer_step(optimizer)
        lr = optimizer.param_groups[0]["lr"] if optimizer is not None else 0.0
        samples = _batch_len(batch) * int(trainer.accumulate_grad_batches)
        s.end_step(lr=lr, samples=samples)
        next_step = trainer.global_step
        if s.checkpoint_due(next_step):
            path = s.checkpoint_path(next_step)
            trainer.save_checkpoint(path)
            s.checkpoint_written(next_step, path)
        if s.stop_requested:
            trainer.should_stop = True

    def on_train_end(self, trainer, pl_module):
        self.session.done("passed")

    def on_exception(self, trainer, pl_module, exception):
        if isinstance(exception, SystemExit) and self.session.finished:
            return
        self.session.exception(exception)


def _scaler(trainer):
    """The precision plugin's torch.amp.GradScaler ("16-mixed"), or None."""
    scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
    return scaler if scaler is not None and hasattr(scaler, "get_scale") else None


def _batch_len(batch):
    import torch
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


__all__ = ["DbhCallback", "Finding"]
