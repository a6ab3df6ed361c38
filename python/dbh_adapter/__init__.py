"""Run your own PyTorch or Lightning training under dbh.

dbh (a harness that reproduces, injects and bisects training failures) starts
your training command as its worker; this package is the worker's side of the
contract (docs/worker-protocol.md in the dbh repository):

    import dbh_adapter
    dbh = dbh_adapter.connect()                 # inactive outside dbh: nothing changes
    train_set = dbh.dataset(train_set)          # the sample subset dbh asks for
    trainer = L.Trainer(..., callbacks=[*dbh.lightning_callbacks()])
    trainer.fit(module, datamodule=dm, ckpt_path=dbh.resume_path())

A plain PyTorch loop uses the session directly (with fp16, pass the loss
scaler: `dbh.watch(model, optimizer, scaler=torch.amp.GradScaler())`, and
`backward` / `optimizer_step` scale, unscale, step and update it):

    with dbh_adapter.connect() as dbh:
        dbh.watch(model, optimizer)
        for step, batch in dbh.steps(loader):
            dbh.backward(loss_of(model, batch))
            dbh.optimizer_step()
"""

from . import _protocol
from ._monitors import Finding
from ._protocol import ProtocolError, under_dbh
from ._session import VERSION as __version__
from ._session import Session, float_bits


def connect(environ=None):
    """The session of this process: connected to dbh when dbh started it (the
    event pipe, the resolved scenario, the trial folder), else inactive."""
    if not under_dbh(environ):
        return _Inactive()
    _protocol.die_with_supervisor(environ)
    link = _protocol.Link(environ)
    return _Connected(link)


class _Connected(Session):
    def lightning_callbacks(self):
        from .lightning import DbhCallback
        self.framework = "lightning"
        return [DbhCallback(self)]


class _Inactive(Session):
    def __init__(self):
        super().__init__(None)

    def lightning_callbacks(self):
        return []


__all__ = ["connect", "Session", "Finding", "ProtocolError", "under_dbh", "float_bits", "__version__"]
